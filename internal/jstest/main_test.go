package jstest

import (
	"testing"

	"github.com/toolbus/toolbus/internal/testmain"
)

func TestMain(m *testing.M) {
	testmain.Main(m, testmain.Config{})
}
