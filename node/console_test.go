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

// `toolbus node -console ADDR` serves the console on the node's own connection, and
// says where in its log.
func TestRunServesConsole(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(bustest.Context(t))
	var log bustest.Buffer
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- Run(ctx, "toolbus node", []string{"-name", "c1", "-store-dir", dir, "-home", dir, "-categories", "todo",
			"-turns=false", "-console", "127.0.0.1:0"}, &log)
	}()
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
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
