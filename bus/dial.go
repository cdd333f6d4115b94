package bus

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/toolbus/toolbus/internal/redact"
)

// Client liveness defaults for Dial. nats.go pings every 2 minutes and gives
// up after 2 unanswered pings, so a client of a server that stops running
// (paused, not crashed: its socket stays open) waits minutes before it fails
// over to another URL of its list. With these it notices within about
// DialPingInterval*(DialMaxPingsOut+1).
const (
	DialPingInterval = 2 * time.Second
	DialMaxPingsOut  = 2
)

// Credentials authenticate a client connecting over the network.
type Credentials struct {
	User     string
	Password string
	// CredsFile is a NATS credentials file (JWT and nkey seed).
	CredsFile string
	// CAFile, a PEM file, verifies the server's TLS certificate (for a
	// server whose certificate the system does not trust).
	CAFile string
	// InboxPrefix is where the client's replies come (nats.CustomInboxPrefix).
	// Empty means [InboxPrefix] of the user, the one inbox a user of a toolbus
	// users file may subscribe to: User, or else the user of the first URL
	// ("nats://user:pass@host"), when it is one subject token; otherwise (a
	// credentials file, no user) nats.go's "_INBOX".
	InboxPrefix string
}

// inboxPrefix is the inbox prefix Dial connects to urls with, "" for nats.go's default.
func (c Credentials) inboxPrefix(urls string) string {
	if c.InboxPrefix != "" {
		return c.InboxPrefix
	}
	if c.CredsFile != "" {
		return ""
	}
	user := c.User
	if user == "" {
		first, _, _ := strings.Cut(urls, ",")
		if u, err := url.Parse(strings.TrimSpace(first)); err == nil && u.User != nil {
			user = u.User.Username()
		}
	}
	if !ValidToken(user) {
		return ""
	}
	return InboxPrefix(user)
}

// Dial connects to a NATS server or cluster at url (comma-separated URLs for
// a cluster), named name, and keeps reconnecting for as long as the process
// runs. It fails fast, with the server's own words, when the first connection
// is refused. Its replies come to cred's inbox prefix ([Credentials.InboxPrefix]).
// The error shows url with its credentials masked.
func Dial(ctx context.Context, url, name string, cred Credentials, opts ...nats.Option) (*nats.Conn, error) {
	all := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.Timeout(5 * time.Second),
		nats.PingInterval(DialPingInterval),
		nats.MaxPingsOutstanding(DialMaxPingsOut),
	}
	if dl, ok := ctx.Deadline(); ok {
		all = append(all, nats.Timeout(time.Until(dl)))
	}
	switch {
	case cred.CredsFile != "":
		all = append(all, nats.UserCredentials(cred.CredsFile))
	case cred.User != "":
		all = append(all, nats.UserInfo(cred.User, cred.Password))
	}
	if cred.CAFile != "" {
		all = append(all, nats.RootCAs(cred.CAFile))
	}
	if p := cred.inboxPrefix(url); p != "" {
		all = append(all, nats.CustomInboxPrefix(p))
	}
	nc, err := nats.Connect(url, append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w%s", redact.URL(url), err, authAdvice(err, cred))
	}
	return nc, nil
}

// authAdvice says what to pass when the server refused the login: the server's
// "Authorization Violation" names no reason.
func authAdvice(err error, cred Credentials) string {
	if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(err.Error(), "Authorization Violation") {
		return ""
	}
	switch {
	case cred.CredsFile != "":
		return " (the server refused the credentials file " + cred.CredsFile + ")"
	case cred.User == "":
		return " (the server wants a login: pass -user NAME, or set NATS_USER, with its password in NATS_PASSWORD or -pass-file FILE; or -creds FILE)"
	case cred.Password == "":
		return fmt.Sprintf(" (user %s sent no password: set NATS_PASSWORD or pass -pass-file FILE)", cred.User)
	}
	return fmt.Sprintf(" (the server refused user %s and its password: check -user, and NATS_PASSWORD or -pass-file)", cred.User)
}

// Replies. A listener user receives the replies to its requests on an inbox prefix of
// its own (the server package's role permissions allow it no other inbox); its clients
// connect with nats.CustomInboxPrefix(InboxPrefix(user)), as [Dial] does.

// inboxPrefix starts every user's inbox prefix. Its first token is never
// nats.go's default "_INBOX", so no user's inbox overlaps the node's own.
const inboxPrefix = "_INBOX_"

// InboxPrefix is the prefix of the replies to user, its login name or, for an
// nkey user, its public key: "_INBOX_<user>" (for nats.CustomInboxPrefix; the
// subjects are "_INBOX_<user>.<nuid>..."). user must satisfy [ValidToken], or
// the prefix would overlap another user's or not be a subject.
func InboxPrefix(user string) string { return inboxPrefix + user }

// UserInbox matches every reply subject of user: "_INBOX_<user>.>".
func UserInbox(user string) string { return InboxPrefix(user) + ".>" }
