package console

import (
	"bytes"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/toolbus/toolbus/client"
	"github.com/toolbus/toolbus/internal/redact"
)

//go:embed assets
var assets embed.FS

var index = template.Must(template.ParseFS(assets, "assets/index.html"))

// tokenHeader carries the console's per-server token on every state-changing request.
// A page of another origin can neither read the token (it is in the console's page)
// nor send a custom header to the console without a CORS preflight, which the console
// never answers.
const tokenHeader = "X-Toolbus-Console"

// maxBody bounds a request's body: a reason and a few ids.
const maxBody = 64 << 10

// Handler is the console's HTTP handler: the page, its assets, the JSON API and the
// live feed.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets")
	files := http.StripPrefix("/assets/", http.FileServerFS(static))
	// The script and the style sheet, and nothing else: no listing, no raw template.
	mux.Handle("GET /assets/app.js", files)
	mux.Handle("GET /assets/style.css", files)
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("GET /api/info", s.info)
	mux.HandleFunc("GET /api/turns", s.turns)
	mux.HandleFunc("GET /api/turn", s.turn)
	mux.HandleFunc("GET /api/workflows", s.workflows)
	mux.HandleFunc("GET /api/workflow", s.workflow)
	mux.HandleFunc("GET /api/jobs", s.jobs)
	mux.HandleFunc("GET /api/schedules", s.schedules)
	mux.HandleFunc("GET /api/nodes", s.nodes)
	mux.HandleFunc("GET /api/events", s.events)
	mux.HandleFunc("POST /api/abort", s.guard(s.abort))
	mux.HandleFunc("POST /api/approve", s.guard(s.approve))
	mux.HandleFunc("POST /api/workflow/cancel", s.guard(s.cancelWorkflow))
	mux.HandleFunc("POST /api/job/cancel", s.guard(s.cancelJob))
	mux.HandleFunc("POST /api/schedule/remove", s.guard(s.removeSchedule))
	return s.gate(mux)
}

// gate checks every request: the password when the console has one; otherwise the
// Host header must name loopback, so that a page of another site cannot reach a
// loopback console through a DNS name rebound to 127.0.0.1.
func (s *Server) gate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		if s.cfg.Password != "" {
			_, pass, ok := r.BasicAuth()
			if !ok || subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.Password)) != 1 {
				h.Set("WWW-Authenticate", `Basic realm="toolbus console", charset="UTF-8"`)
				http.Error(w, "the console asks for its password", http.StatusUnauthorized)
				return
			}
		} else if host := hostOnly(r.Host); !isLoopback(host) {
			http.Error(w, "this console serves loopback names only (Host "+r.Host+")", http.StatusMisdirectedRequest)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// guard protects a state-changing request from other sites: it must carry the
// console's token in tokenHeader, come from the console's own origin when the browser
// says where it comes from (Origin, Sec-Fetch-Site), and be JSON.
func (s *Server) guard(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(tokenHeader)), []byte(s.token)) != 1 {
			writeError(w, http.StatusForbidden, errors.New("this request lacks the console's token: reload the page"))
			return
		}
		if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
			writeError(w, http.StatusForbidden, errors.New("cross-site request refused"))
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			u, err := url.Parse(o)
			if err != nil || u.Host != r.Host {
				writeError(w, http.StatusForbidden, errors.New("cross-origin request refused"))
				return
			}
		}
		if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			writeError(w, http.StatusUnsupportedMediaType, errors.New("want a JSON body"))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next(w, r)
	}
}

// page is the console's one page; its script routes between the views.
func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := index.Execute(&b, map[string]string{"Token": s.token}); err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes())
}

// writeJSON answers v, with the process's registered secrets redacted (as in
// transcripts): a tool's label or error may quote one.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(redact.Secrets(b))
}

// writeError answers an error as {"error": text}; a refusal of the bus is 403.
func writeError(w http.ResponseWriter, code int, err error) {
	if errors.Is(err, client.ErrRefused) {
		code = http.StatusForbidden
	}
	b, _ := json.Marshal(map[string]string{"error": redact.URL(err.Error())})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(redact.Secrets(b))
}

// decode reads a request's JSON body into v.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	d := json.NewDecoder(r.Body)
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return false
	}
	return true
}
