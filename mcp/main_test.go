package mcp_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/npmtest"
	"github.com/toolbus/toolbus/internal/testmain"
	"github.com/toolbus/toolbus/mcp"
)

// serverEnv makes the test binary an MCP server on stdio (testServer) instead of
// running the tests: a go-sdk server in its own process, which tests start behind
// -mcp and kill at will.
const serverEnv = "TOOLBUS_MCP_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		testServer()
		return
	}
	testmain.Main(m, testmain.Config{Parallel: parallelTests})
}

// parallelTests: the tests wait on MCP servers in processes of their own (npm's among
// them); with -race on 2 cores the package took 22.7 s at go test's default of 2 at
// once, 18.1 s at 4, 20.9 s at 6.
const parallelTests = 4

// testServerConfig is the test's own MCP server as a category NAME; its slow tool
// writes the file cancelled into marks when its call is cancelled.
func testServerConfig(t *testing.T, name, marks string) mcp.ServerConfig {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return mcp.ServerConfig{Name: name, Command: []string{exe}, Env: []string{serverEnv + "=1", "TOOLBUS_MCP_TEST_MARKS=" + marks},
		InitTimeout: time.Minute} // a loaded machine, not the server, is slow
}

type echoArgs struct {
	Message string `json:"message" jsonschema:"the text to echo"`
}

type slowArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"how long to work"`
}

// testServer serves, on stdio, tools that each try one edge: names toolbus cannot
// use as they are, a result of 10 MiB, a server that dies in a call, a call that
// waits for its cancellation, and (added to tools/list behind the SDK's back) a tool
// whose schema is not an object. Its list changes: it offers "extra" when it starts
// while the file extra is in its marks, and "grow" adds "grown" to it as it runs (the
// go-sdk tells clients: notifications/tools/list_changed).
func testServer() {
	marks := os.Getenv("TOOLBUS_MCP_TEST_MARKS")
	s := sdk.NewServer(&sdk.Implementation{Name: "toolbus-test-server", Version: "1"}, nil)
	if _, err := os.Stat(filepath.Join(marks, "extra")); err == nil {
		sdk.AddTool(s, &sdk.Tool{Name: "extra", Description: "Offered when the server started with the mark extra"},
			func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
				return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "extra"}}}, nil, nil
			})
	}
	sdk.AddTool(s, &sdk.Tool{Name: "grow", Description: "Adds the tool grown"},
		func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
			sdk.AddTool(s, &sdk.Tool{Name: "grown", Description: "Added as the server ran"},
				func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "grown"}}}, nil, nil
				})
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "grew"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "echo.v2", Description: "Echo, dotted name"},
		func(ctx context.Context, req *sdk.CallToolRequest, a echoArgs) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "echo: " + a.Message}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "say hello", Description: "A name with a space",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true}},
		func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "hello"}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "big", Description: "10 MiB of text"},
		func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: strings.Repeat("x", 10<<20)}}}, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "die", Description: "Exits in the middle of the call"},
		func(ctx context.Context, req *sdk.CallToolRequest, a struct{}) (*sdk.CallToolResult, any, error) {
			os.Exit(3)
			return nil, nil, nil
		})
	sdk.AddTool(s, &sdk.Tool{Name: "slow", Description: "Works until done or cancelled, reporting progress"},
		func(ctx context.Context, req *sdk.CallToolRequest, a slowArgs) (*sdk.CallToolResult, any, error) {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			end := time.After(time.Duration(a.Seconds * float64(time.Second)))
			for i := 1; ; i++ {
				select {
				case <-ctx.Done():
					_ = os.WriteFile(filepath.Join(marks, "cancelled"), []byte(context.Cause(ctx).Error()), 0o644)
					return nil, nil, ctx.Err()
				case <-end:
					return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: "done"}}}, nil, nil
				case <-tick.C:
					if tok := req.Params.GetProgressToken(); tok != nil {
						_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: tok, Progress: float64(i), Message: "working"})
					}
				}
			}
		})
	s.AddReceivingMiddleware(func(next sdk.MethodHandler) sdk.MethodHandler {
		return func(ctx context.Context, method string, req sdk.Request) (sdk.Result, error) {
			res, err := next(ctx, method, req)
			if lt, ok := res.(*sdk.ListToolsResult); ok && err == nil {
				lt.Tools = append(lt.Tools, &sdk.Tool{Name: "array-root", InputSchema: map[string]any{"type": "array"}})
			}
			return res, err
		}
	})
	if err := s.Run(context.Background(), &sdk.StdioTransport{}); err != nil && !strings.Contains(err.Error(), "EOF") {
		fmt.Fprintln(os.Stderr, "test server:", err)
		os.Exit(1)
	}
}

// npmPrefix is the install of the reference MCP server and mcporter; the test is
// skipped, saying so, where npm cannot install them.
func npmPrefix(t *testing.T) string {
	return npmtest.Prefix(t, npmtest.Mcporter, npmtest.Everything)
}
