package toolbus_test

import (
	"os/exec"
	"strings"
	"testing"
)

// What a program that only speaks the wire must not link: the embedded server, the
// actors, the categories' heavy parts, the providers' SDKs, telemetry's exporters, the
// MCP SDK and the browser driver.
var serverOnly = []string{
	"github.com/nats-io/nats-server/",
	"github.com/asynkron/protoactor-go/",
	"github.com/blevesearch/",
	"github.com/containerd/cgroups/",
	"codeberg.org/readeck/go-readability/",
	"github.com/openai/openai-go/",
	"github.com/anthropics/anthropic-sdk-go/",
	"go.opentelemetry.io/otel/sdk",
	"github.com/prometheus/",
	"github.com/modelcontextprotocol/go-sdk/",
	"github.com/chromedp/",
	"github.com/toolbus/toolbus/bus/server",
	"github.com/toolbus/toolbus/actors",
	"github.com/toolbus/toolbus/gateway",
	"github.com/toolbus/toolbus/brain",
	"github.com/toolbus/toolbus/toolsets/computer",
	"github.com/toolbus/toolbus/toolsets/web",
	"github.com/toolbus/toolbus/telemetry",
}

// maxWireDeps bounds the packages outside the standard library that the client and a
// Go tool host link. Measured at 56 (client, with the profiles and the pages) and 47 (host), against
// 229 for the client when it linked the server and the categories: nats.go, the JSON Schema validator and
// repair ladder, and the module's own wire packages. (Counted with the standard library
// the client lists 251; nats.go alone lists 208, so the bound is on the rest.)
const maxWireDeps = 150

// TestClientLinksNoServer: package client, package host and the wire (bus) link none of
// serverOnly, and at most maxWireDeps packages outside the standard library.
func TestClientLinksNoServer(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("needs the go command to list dependencies:", err)
	}
	for _, pkg := range []string{"./client", "./host", "./bus"} {
		cmd := exec.Command(goBin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, stderr.String())
		}
		deps := strings.Fields(string(out))
		for _, d := range deps {
			for _, banned := range serverOnly {
				// The module's own packages by name (computer's limits are light), the
				// others by module.
				if d == banned || !strings.HasPrefix(banned, "github.com/toolbus/toolbus/") && strings.HasPrefix(d, banned) {
					t.Errorf("%s links %s", pkg, d)
				}
			}
		}
		t.Logf("%s: %d packages outside the standard library", pkg, len(deps))
		if len(deps) > maxWireDeps {
			t.Errorf("%s links %d packages outside the standard library, over %d", pkg, len(deps), maxWireDeps)
		}
	}
}
