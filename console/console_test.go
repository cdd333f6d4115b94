package console_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/bus/bustest"
	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/console"
)

// A console on an address other hosts reach needs a password, and says so.
func TestConsoleOffLoopbackNeedsPassword(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t, nil)
	cl := client.New(bustest.Conn(t, s, "console"))
	for _, addr := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		_, err := console.Start(console.Config{Addr: addr, Client: cl})
		if !errors.Is(err, console.ErrNeedsPassword) || !strings.Contains(err.Error(), "non-loopback address needs a password") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	con, err := console.Start(console.Config{Addr: "0.0.0.0:0", Client: cl, Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	_ = con.Close()
}

// Every request of a console with a password asks for it; a console without one
// answers loopback names only; it serves its page, script and style sheet, nothing else; a state-changing request needs the page's token, the
// console's origin and a JSON body, and is a POST.
func TestConsoleRefusesOtherSites(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t, nil)
	cl := client.New(bustest.Conn(t, s, "console"))
	open, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = open.Close() })
	locked, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: cl, Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = locked.Close() })

	for _, path := range []string{"assets/", "assets/index.html", "api/nothing"} {
		resp, err := http.Get(open.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET /%s: %d", path, resp.StatusCode)
		}
	}
	page := get(t, open.URL(), nil)
	token := between(page, `name="toolbus-token" content="`, `"`)
	if len(token) < 32 {
		t.Fatalf("no token in the page:\n%s", page)
	}
	abort := open.URL() + "api/abort"
	body := `{"turn_id":"t1","reason":"x"}`
	for _, tc := range []struct {
		name   string
		method string
		header map[string]string
		want   int
	}{
		{"no token", "POST", map[string]string{"Content-Type": "application/json"}, http.StatusForbidden},
		{"wrong token", "POST", map[string]string{"Content-Type": "application/json", "X-Toolbus-Console": strings.Repeat("0", len(token))}, http.StatusForbidden},
		{"other origin", "POST", map[string]string{"Content-Type": "application/json", "X-Toolbus-Console": token, "Origin": "http://evil.example"}, http.StatusForbidden},
		{"cross site", "POST", map[string]string{"Content-Type": "application/json", "X-Toolbus-Console": token, "Sec-Fetch-Site": "cross-site"}, http.StatusForbidden},
		{"a form", "POST", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "X-Toolbus-Console": token}, http.StatusUnsupportedMediaType},
		{"a GET", "GET", map[string]string{"X-Toolbus-Console": token}, http.StatusMethodNotAllowed},
		{"rebound name", "POST", map[string]string{"Content-Type": "application/json", "X-Toolbus-Console": token, "Host": "evil.example"}, http.StatusMisdirectedRequest},
		// The page's own request: this bus keeps no turns, so the abort is sent to no one.
		{"the page's", "POST", map[string]string{"Content-Type": "application/json", "X-Toolbus-Console": token, "Origin": strings.TrimSuffix(open.URL(), "/"), "Sec-Fetch-Site": "same-origin"}, http.StatusOK},
	} {
		req, _ := http.NewRequest(tc.method, abort, strings.NewReader(body))
		for k, v := range tc.header {
			req.Header.Set(k, v)
		}
		if h := tc.header["Host"]; h != "" {
			req.Host = h
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, b, tc.want)
		}
	}

	for _, pass := range []string{"", "wrong"} {
		req, _ := http.NewRequest("GET", locked.URL(), nil)
		if pass != "" {
			req.SetBasicAuth("me", pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "Basic") {
			t.Errorf("password %q: %d %v", pass, resp.StatusCode, resp.Header)
		}
	}
	if page := get(t, locked.URL(), func(r *http.Request) { r.SetBasicAuth("anyone", "s3cret") }); !strings.Contains(page, "toolbus console") {
		t.Errorf("with the password: %s", page)
	}
}

// A console nobody looks at holds no subscription: a page's live feed subscribes while
// it is open, and its subscription ends with it.
func TestConsoleIdleSubscribesNothing(t *testing.T) {
	t.Parallel()
	s := bustest.Server(t, nil)
	nc := bustest.Conn(t, s, "console")
	cl := client.New(nc)
	con, err := console.Start(console.Config{Addr: "127.0.0.1:0", Client: cl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = con.Close() })
	get(t, con.URL()+"api/turns", nil) // what a read leaves behind (the request multiplexer)
	idle := nc.NumSubscriptions()

	for _, scope := range []string{"turns", "turn&id=t1"} {
		ctx, cancel := context.WithCancel(bustest.Context(t))
		req, _ := http.NewRequestWithContext(ctx, "GET", con.URL()+"api/events?scope="+scope, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if line, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || line != "event: ready\n" {
			t.Fatalf("%s: the feed begins %q %v", scope, line, err)
		}
		if n := nc.NumSubscriptions(); n != idle+1 || con.Feeds() != 1 {
			t.Errorf("%s: with a page open, %d subscriptions (idle %d) and %d feeds", scope, n, idle, con.Feeds())
		}
		cancel()
		resp.Body.Close()
		bustest.CheckFor(t, 10*time.Second, 10*time.Millisecond, func() error {
			if n := nc.NumSubscriptions(); n != idle || con.Feeds() != 0 {
				return fmt.Errorf("%s: the page closed, %d subscriptions remain (idle %d), %d feeds", scope, n, idle, con.Feeds())
			}
			return nil
		})
	}
}

func get(t *testing.T, url string, edit func(*http.Request)) string {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if edit != nil {
		edit(req)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

func between(s, from, to string) string {
	_, after, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(after, to)
	return v
}
