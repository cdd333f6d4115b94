package bustest

import "go.uber.org/goleak"

// KnownLeaks are goroutines of the dependencies that outlive what started them, for
// goleak.VerifyTestMain: every package's tests leave them alone and find any other.
func KnownLeaks() []goleak.Option {
	return []goleak.Option{
		// protoactor throttles its dead-letter log with a goroutine that lives one
		// throttle interval after a dead letter; a late reply or abort reaching a turn
		// that has just stopped is one.
		goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"),
		// bleve (the brain's index) starts its analysis workers when the package is
		// initialised; they live as long as the process.
		goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"),
		// nats.go v1.55.0 jetstream: newAsyncReply starts this goroutine, which reads the
		// publisher's status channel under its lock; a JetStream context cleaned up
		// before it does (the connection closed right after an async publish, as an
		// object store Put makes) has set the channel to nil, and the goroutine waits on
		// it for the process's life (seen once in brain's tests).
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
	}
}
