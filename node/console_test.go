package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus/bustest"
)

// runNode runs `toolbus node` with args, and the flags every test here gives, until
// stop, which fails the test if the node ended with an error.
func runNode(t *testing.T, args ...string) (log *bustest.Buffer, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(bustest.Context(t))
	log = &bustest.Buffer{}
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- Run(ctx, "toolbus node", append([]string{"-store-dir", dir, "-home", dir, "-categories", "todo", "-turns=false"}, args...), log)
	}()
	return log, func() {
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

// `toolbus node -console ADDR` serves the console on the node's own connection, and
// says where in its log.
func TestRunServesConsole(t *testing.T) {
	t.Parallel()
	log, stop := runNode(t, "-name", "c1", "-console", "127.0.0.1:0")
	var url string
	bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		m := regexp.MustCompile(`console ready\" url=(http://\S+)`).FindStringSubmatch(log.String())
		if m == nil {
			return fmt.Errorf("no console in the log:\n%s", log.String())
		}
		url = m[1]
		return nil
	})
	resp, err := http.Get(url + "api/nodes")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"name":"todo"`) || !strings.Contains(string(b), `"node":"c1"`) {
		t.Errorf("the console's nodes: %d %s", resp.StatusCode, b)
	}
	stop()
}

// `toolbus node -log-level debug` logs the embedded server's debug lines too (a stalled
// cluster is diagnosed from its Raft groups' votes and leaders); info does not.
func TestRunDebugLogsServer(t *testing.T) {
	t.Parallel()
	for _, level := range []string{"debug", "info"} {
		log, stop := runNode(t, "-name", "d1", "-log-level", level)
		bustest.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
			if !strings.Contains(log.String(), "node ready") {
				return fmt.Errorf("not ready:\n%s", log.String())
			}
			return nil
		})
		stop()
		serverDebug := regexp.MustCompile(`(?m)^time=\S+ level=DEBUG .* server=d1$`).MatchString(log.String())
		if serverDebug != (level == "debug") {
			t.Errorf("-log-level %s: the server's debug lines logged %v:\n%s", level, serverDebug, log.String())
		}
	}
}
