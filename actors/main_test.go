package actors

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// protoactor throttles its dead-letter log with a goroutine that lives
		// one throttle interval after a dead letter. Dead letters are normal
		// here: a late reply or abort can reach a turn that has just stopped.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// bleve (the brain's index) starts its analysis workers when the package is
		// initialised; they live as long as the process.
		goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"),
	)
}
