package web

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/net/html/charset"

	"github.com/toolbus/toolbus"
)

// FetchDetails are the details of a web_fetch result.
type FetchDetails struct {
	// URL is the URL asked for; FinalURL the one that answered, after Redirects redirects.
	URL         string `json:"url"`
	FinalURL    string `json:"final_url"`
	Redirects   int    `json:"redirects,omitempty"`
	Status      int    `json:"status"`
	ContentType string `json:"content_type,omitempty"`
	// Bytes is how much of the body was read; BodyCut says the body was longer than the
	// host's size cap, and the rest was not read.
	Bytes   int64 `json:"bytes"`
	BodyCut bool  `json:"body_cut,omitempty"`
	// Format is how the body was turned into text: markdown (from HTML), text or json.
	Format string `json:"format,omitempty"`
	Title  string `json:"title,omitempty"`
	// Chars is the length of the page's text; the result holds Returned characters from
	// Offset, and Next is the offset to read on from (0: the text ends in this result).
	Chars    int `json:"chars"`
	Offset   int `json:"offset"`
	Returned int `json:"returned"`
	Next     int `json:"next,omitempty"`
}

// BlockedError is a connection web_fetch refused to open: the address is loopback,
// private, link-local or otherwise not on the public internet, and the agent's profile
// does not allow private addresses.
type BlockedError struct {
	Addr   netip.AddrPort
	Reason string // "loopback", "private", ...
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("refused to connect to %s: it is a %s address", e.Addr, e.Reason)
}

// nonPublic are address ranges web_fetch does not reach unless allowed, beyond those
// netip.Addr's predicates name.
var nonPublic = []struct {
	prefix netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "this-network"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (carrier-grade NAT)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("fec0::/10"), "site-local"},
}

// nat64 is the well-known NAT64 prefix: its addresses stand for the IPv4 address in their
// last 32 bits.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// addrReason says why web_fetch refuses ip, or "" for a public address.
func addrReason(ip netip.Addr) string {
	ip = ip.Unmap()
	if ip.Is6() && nat64.Contains(ip) {
		b := ip.As16()
		return addrReason(netip.AddrFrom4([4]byte(b[12:])))
	}
	switch {
	case !ip.IsValid():
		return "unreadable"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast():
		return "link-local"
	case ip.IsMulticast(), ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, p := range nonPublic {
		if p.prefix.Contains(ip) {
			return p.reason
		}
	}
	return ""
}

// guard is the dialer's Control for agents that may not reach private addresses. It runs
// on the address the dialer is about to connect to, after name resolution, for every
// connection (the first and each redirect's): a name that resolves to a private address,
// at any time, is refused where the connection is made.
func (c Config) guard(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("refused to connect to %s: not an IP address and port this host can check", address)
	}
	reason := addrReason(ap.Addr())
	if c.addrReason != nil {
		reason = c.addrReason(ap)
	}
	if reason != "" {
		return &BlockedError{Addr: netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), Reason: reason}
	}
	return nil
}

// fetcher holds the two HTTP clients of web_fetch: one that reaches only public
// addresses, one for agents allowed private ones. Each has its own connection pool, so a
// connection one opened is never reused by the other.
type fetcher struct {
	cfg            Config
	public, anyone *http.Client
}

func newFetcher(c Config) *fetcher {
	return &fetcher{cfg: c, public: c.fetchClient(false), anyone: c.fetchClient(true)}
}

// errTooManyRedirects ends a fetch whose redirects exceed the cap.
type tooManyRedirects struct{ max int }

func (e tooManyRedirects) Error() string {
	return fmt.Sprintf("stopped after %d redirects (the most this host follows)", e.max)
}

func (c Config) fetchClient(allowPrivate bool) *http.Client {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !allowPrivate {
		d.Control = c.guard
	}
	tr := &http.Transport{
		// No proxy: the guard checks the address the connection goes to, which must be
		// the page's own.
		Proxy:                  nil,
		DialContext:            d.DialContext,
		ForceAttemptHTTP2:      true,
		TLSHandshakeTimeout:    10 * time.Second,
		MaxIdleConns:           16,
		IdleConnTimeout:        30 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > c.MaxRedirects {
				return tooManyRedirects{c.MaxRedirects}
			}
			if err := checkFetchURL(req.URL); err != nil {
				return fmt.Errorf("redirect to %s refused: %w", req.URL.Redacted(), err)
			}
			return nil
		},
	}
}

// checkFetchURL refuses what web_fetch does not read: a scheme other than http and
// https, a URL without a host or one that carries credentials.
func checkFetchURL(u *url.URL) error {
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		if u.Scheme == "" {
			return errors.New("the URL has no scheme: write it in full, as https://example.com/page")
		}
		return fmt.Errorf("web_fetch reads http and https URLs, not %s:", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("the URL has no host")
	case u.User != nil:
		return errors.New("web_fetch does not send credentials: leave the user and password out of the URL")
	}
	return nil
}

// textKind says how web_fetch reads a media type: "html", "json", "text", or "" for
// content it refuses.
func textKind(mt string) string {
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		return "html"
	case mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == "application/x-ndjson":
		return "json"
	case strings.HasPrefix(mt, "text/"), mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/x-javascript", mt == "application/ecmascript",
		mt == "application/yaml", mt == "application/x-yaml", mt == "application/toml", mt == "application/x-sh":
		return "text"
	}
	return ""
}

func (h *host) fetch(ctx context.Context, call toolbus.Call, a fetchArgs) (toolbus.Result, error) {
	b, err := h.binding(ctx, call.Agent)
	if err != nil {
		return toolbus.Result{}, err
	}
	if b.Fetch == nil {
		return toolbus.Result{}, fmt.Errorf("the profile of agent %s binds no fetch, so web_fetch is not available to it "+
			"(an operator allows it with: toolbus agent set -web-fetch %s)", call.Agent, call.Agent)
	}
	u, err := url.Parse(strings.TrimSpace(a.URL))
	if err != nil {
		return toolbus.Result{}, fmt.Errorf("%q is not a URL: %v", a.URL, unwrapURLError(err))
	}
	if err := checkFetchURL(u); err != nil {
		return toolbus.Result{}, fmt.Errorf("%s: %w", a.URL, err)
	}
	u.Fragment, u.RawFragment = "", ""
	maxChars := a.MaxChars
	if maxChars <= 0 {
		maxChars = DefaultMaxChars
	}
	maxChars = min(max(maxChars, 1000), MaxMaxChars)
	if a.Offset < 0 {
		return toolbus.Result{}, fmt.Errorf("offset %d: want 0 or more", a.Offset)
	}
	client := h.fetcher.public
	if b.Fetch.AllowPrivate {
		client = h.fetcher.anyone
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.FetchTimeout)
	defer cancel()
	return h.fetcher.get(ctx, client, u, a.Offset, maxChars, call.Agent)
}

// get fetches u and returns the result for the model.
func (f *fetcher) get(ctx context.Context, client *http.Client, u *url.URL, offset, maxChars int, agent string) (toolbus.Result, error) {
	d := FetchDetails{URL: u.String(), FinalURL: u.String(), Offset: offset}
	timeout := f.cfg.FetchTimeout
	if dl, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(dl).Round(time.Second))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return toolbus.Result{}, fmt.Errorf("fetch %s: %w", u.Redacted(), err)
	}
	req.Header.Set("User-Agent", f.cfg.UserAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9,text/*;q=0.8,*/*;q=0.1")
	resp, err := client.Do(req)
	if err != nil {
		return toolbus.Result{}, fetchError(ctx, u, err, timeout, agent)
	}
	defer resp.Body.Close()
	d.FinalURL = resp.Request.URL.String()
	for r := resp.Request.Response; r != nil; r = r.Request.Response {
		d.Redirects++
	}
	d.Status = resp.StatusCode
	d.ContentType = resp.Header.Get("Content-Type")

	// The body, read up to the cap and counted before any decoding.
	counted := &countingReader{r: io.LimitReader(resp.Body, f.cfg.MaxBytes)}
	br := bufio.NewReaderSize(counted, 1024)
	mt := mediaType(d.ContentType)
	if mt == "" {
		// No type or an unreadable one: look at the bytes, as browsers do.
		head, _ := br.Peek(512)
		mt = mediaType(http.DetectContentType(head))
		d.ContentType = cmpOr(d.ContentType, mt+" (sniffed)")
	}
	kind := textKind(mt)
	if kind == "" {
		return failed(d, "refused %s: its content is %s, not text; web_fetch reads HTML, plain text, JSON and XML", short(d.FinalURL), mt)
	}
	// The charset of the header, else of the page's own <meta> or its bytes.
	text, err := charset.NewReader(br, resp.Header.Get("Content-Type"))
	if err != nil {
		text = br // an unknown charset: read the bytes as UTF-8
	}
	raw, err := io.ReadAll(text)
	if err != nil {
		if ctx.Err() != nil {
			return toolbus.Result{}, fmt.Errorf("%s did not send the whole page within %s (%s read)", hostOf(d.FinalURL), timeout, formatBytes(counted.n))
		}
		return toolbus.Result{}, fmt.Errorf("read %s: %v", short(d.FinalURL), err)
	}
	d.Bytes = counted.n
	if d.Bytes >= f.cfg.MaxBytes {
		// One more byte tells a body of exactly the cap from a longer one.
		var one [1]byte
		if n, _ := resp.Body.Read(one[:]); n > 0 {
			d.BodyCut = true
		}
	}
	if bytes.IndexByte(raw, 0) >= 0 {
		return failed(d, "refused %s: it says it is %s but holds binary data", short(d.FinalURL), mt)
	}
	raw = bytes.ToValidUTF8(raw, []byte("\uFFFD"))

	var page string
	switch kind {
	case "html":
		d.Format = "markdown"
		final, _ := url.Parse(d.FinalURL)
		d.Title, page, err = htmlToMarkdown(raw, final)
		if err != nil {
			return failed(d, "turn %s into text: %v", short(d.FinalURL), err)
		}
	case "json":
		d.Format = "json"
		page = string(raw)
	default:
		d.Format = "text"
		page = string(raw)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		msg := fmt.Sprintf("%s answered HTTP %d %s", d.FinalURL, resp.StatusCode, http.StatusText(resp.StatusCode))
		if s := cleanSnippet(page, 500); s != "" {
			msg += ": " + s
		}
		return toolbus.ErrorResult(msg).WithDetails(d), nil
	}
	w, err := window(page, offset, maxChars)
	if err != nil {
		return failed(d, "%v", err)
	}
	d.Chars, d.Returned, d.Next = w.total, w.end-w.start, w.next
	return toolbus.TextResult(formatPage(d, w)).WithDetails(d), nil
}

// failed is an error result that keeps the details of what was fetched.
func failed(d FetchDetails, format string, args ...any) (toolbus.Result, error) {
	return toolbus.ErrorResult(fmt.Sprintf(format, args...)).WithDetails(d), nil
}

// fetchError says why a request failed, naming the refused address when the guard
// refused one.
func fetchError(ctx context.Context, u *url.URL, err error, timeout time.Duration, agent string) error {
	var (
		blocked *BlockedError
		tooMany tooManyRedirects
		ue      *url.Error
	)
	at := u.Redacted()
	if errors.As(err, &ue) {
		at = ue.URL
	}
	switch {
	case errors.As(err, &blocked):
		return fmt.Errorf("fetch %s: %v; the profile of agent %s does not allow web_fetch to reach loopback, private or link-local addresses "+
			"(an operator allows them with: toolbus agent set -web-fetch-private %s)", at, blocked, agent, agent)
	case errors.As(err, &tooMany):
		return fmt.Errorf("fetch %s: %v; the last redirect pointed to %s", u.Redacted(), tooMany, at)
	case ctx.Err() != nil:
		return fmt.Errorf("fetch %s: no answer within %s", at, timeout)
	}
	return fmt.Errorf("fetch %s: %v", at, unwrapURLError(err))
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// span is the part of a page's text one call returns: characters [start, end) of total;
// next is where to read on, 0 at the end.
type span struct {
	text              string
	start, end, total int
	next              int
}

// window cuts the page's text at offset, at most maxChars characters long. A cut falls on
// a line break, or a space, in the window's last fifth when there is one, so a sentence
// is rarely split; offsets count characters (runes).
func window(page string, offset, maxChars int) (span, error) {
	runes := []rune(page)
	total := len(runes)
	if offset > total || offset > 0 && offset == total {
		return span{}, fmt.Errorf("offset %d is past the end: the page's text has %d characters", offset, total)
	}
	end := min(total, offset+maxChars)
	if end < total {
		floor := end - maxChars/5
		for _, sep := range []rune{'\n', ' '} {
			cut := -1
			for i := end; i > floor && i > offset; i-- {
				if runes[i-1] == sep {
					cut = i
					break
				}
			}
			if cut > 0 {
				end = cut
				break
			}
		}
	}
	s := span{text: string(runes[offset:end]), start: offset, end: end, total: total}
	if end < total {
		s.next = end
	}
	return s, nil
}

// formatPage is web_fetch's text for the model: where the text comes from, the text,
// and where to read on.
func formatPage(d FetchDetails, w span) string {
	var b strings.Builder
	if d.Title != "" {
		fmt.Fprintf(&b, "Title: %s\n", cleanSnippet(d.Title, 300))
	}
	fmt.Fprintf(&b, "URL: %s", d.FinalURL)
	if d.Redirects > 0 {
		fmt.Fprintf(&b, " (redirected from %s)", d.URL)
	}
	b.WriteByte('\n')
	if w.start > 0 {
		fmt.Fprintf(&b, "Characters %d to %d of %d.\n", w.start, w.end, w.total)
	}
	if d.BodyCut {
		fmt.Fprintf(&b, "Only the first %s of the page were read (this host's size cap).\n", formatBytes(d.Bytes))
	}
	b.WriteByte('\n')
	b.WriteString(strings.TrimRight(w.text, " \n"))
	if w.total == 0 {
		b.WriteString("(the page has no text)")
	}
	if w.next > 0 {
		fmt.Fprintf(&b, "\n\n... cut at %d of %d characters; call web_fetch with offset %d to read on", w.end, w.total, w.next)
	}
	return b.String()
}

// hostOf is the host of a URL, for labels.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return raw
	}
	return strings.TrimPrefix(u.Host, "www.")
}

// short is a URL as messages show it: without its scheme, cut at 80 characters.
func short(raw string) string {
	s := raw
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		u.User = nil
		s = strings.TrimPrefix(strings.TrimPrefix(u.String(), u.Scheme+"://"), "www.")
	}
	if utf8.RuneCountInString(s) > 80 {
		s = string([]rune(s)[:79]) + "…"
	}
	return s
}

// shortURL is a URL as activity labels show it: host and the start of the path
// ("example.com/docs/…").
func shortURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil || u.Host == "" {
		return short(raw)
	}
	host := strings.TrimPrefix(u.Host, "www.")
	p := strings.Trim(u.EscapedPath(), "/")
	if p == "" {
		return host
	}
	first, rest, _ := strings.Cut(p, "/")
	if utf8.RuneCountInString(first) > 30 {
		first = string([]rune(first)[:29]) + "…"
		rest = ""
	}
	if rest != "" || u.RawQuery != "" {
		return host + "/" + first + "/…"
	}
	return host + "/" + first
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
