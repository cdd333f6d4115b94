package server

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/toolbus/toolbus/bus"
)

// Role names a set of permissions for a listener user (docs/operations.md §4).
type Role string

const (
	// RoleTurn is a node that runs turns (TurnPermissions), plus the hosts of
	// its categories, if it has any.
	RoleTurn Role = "turn"
	// RoleTool is a host of the given categories and nothing else
	// (ToolPermissions, the todo bucket for the todo category, reading the agent
	// profiles for the web and computer categories, the knowledge pages for the brain
	// category).
	RoleTool Role = "tool"
	// RoleOperator is a person's command line (OperatorPermissions).
	RoleOperator Role = "operator"
	// RoleWatcher reads and publishes nothing (WatcherPermissions).
	RoleWatcher Role = "watcher"
	// RoleAdmin may do anything (AdminPermissions).
	RoleAdmin Role = "admin"
)

// Roles lists every role.
var Roles = []Role{RoleTurn, RoleTool, RoleOperator, RoleWatcher, RoleAdmin}

// RolePermissions are the permissions of role for user, its login name or, for
// an nkey user, its public key; categories are those a tool host (or a turn node
// that also hosts tools) serves, and only those roles take them. But for the
// admin, user must be one subject token ([ValidToken]): its replies come to
// [InboxPrefix](user), the one inbox it may subscribe to.
func RolePermissions(role Role, user string, categories []string) (*natsserver.Permissions, error) {
	if role != RoleAdmin && !bus.ValidToken(user) {
		return nil, fmt.Errorf("user name %q is not one subject token (no '.', '*', '>' or spaces): it names the user's inbox, %s.>", user, bus.InboxPrefix("<user>"))
	}
	p, err := rolePermissions(role, categories)
	if err != nil || role == RoleAdmin {
		return p, err
	}
	return WithInbox(p, user), nil
}

// rolePermissions are the permissions of role without an inbox.
func rolePermissions(role Role, categories []string) (*natsserver.Permissions, error) {
	for _, c := range categories {
		if !bus.ValidToken(c) {
			return nil, fmt.Errorf("category %q is not a valid token", c)
		}
	}
	if len(categories) > 0 && role != RoleTool && role != RoleTurn {
		return nil, fmt.Errorf("role %s takes no categories", role)
	}
	switch role {
	case RoleTurn:
		p := TurnPermissions()
		if len(categories) > 0 {
			p = merge(p, ToolPermissions(categories...)) // JetStream is in TurnPermissions
		}
		if startsTurns(categories) {
			p = merge(p, BackgroundPermissions())
		}
		return p, nil
	case RoleTool:
		if len(categories) == 0 {
			return nil, fmt.Errorf("role %s needs categories", role)
		}
		p := ToolPermissions(categories...)
		if slices.Contains(categories, "todo") {
			p = withTodoStore(p)
		}
		// The web host reads each caller's providers, the computer host its command
		// limits, from the caller's profile.
		if slices.Contains(categories, "web") || slices.Contains(categories, "computer") {
			p = withProfileReader(p)
		}
		if startsTurns(categories) {
			p = merge(p, BackgroundPermissions())
		}
		if slices.Contains(categories, "brain") {
			p = withBrainStore(p)
		}
		if slices.Contains(categories, "workflow") {
			p = withWorkflowStore(p)
		}
		return p, nil
	case RoleOperator:
		return OperatorPermissions(), nil
	case RoleWatcher:
		return WatcherPermissions(), nil
	case RoleAdmin:
		return AdminPermissions(), nil
	}
	return nil, fmt.Errorf("unknown role %q: want one of %s", role, roleList())
}

// startsTurns reports whether categories include one whose tools start turns: jobs and
// schedule (named here as the bus knows them, without importing the toolsets).
func startsTurns(categories []string) bool {
	return slices.Contains(categories, "jobs") || slices.Contains(categories, "schedule")
}

func roleList() string {
	s := make([]string, len(Roles))
	for i, r := range Roles {
		s[i] = string(r)
	}
	return strings.Join(s, ", ")
}

// UserEntry is one user of a users file: a JSON array of
//
//	{"user": "ops", "password_hash": "$2a$11$…", "role": "operator"}
//	{"user": "tools1", "password": "…", "role": "tool", "categories": ["computer"]}
//	{"nkey": "UA…", "role": "watcher"}
//
// Exactly one of Password (plain text), PasswordHash (bcrypt) and Nkey (a
// user's public nkey) is given; an nkey user needs no name.
type UserEntry struct {
	User         string   `json:"user,omitempty"`
	Password     string   `json:"password,omitempty"`
	PasswordHash string   `json:"password_hash,omitempty"`
	Nkey         string   `json:"nkey,omitempty"`
	Role         Role     `json:"role"`
	Categories   []string `json:"categories,omitempty"`
}

// ReadUsersFile reads and checks a users file and returns its users with
// their roles' permissions.
func ReadUsersFile(path string) ([]User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	users, err := ParseUsers(b)
	if err != nil {
		return nil, fmt.Errorf("users file %s: %w", path, err)
	}
	return users, nil
}

// ParseUsers decodes a users file (see [UserEntry]); unknown fields are
// refused, so a misspelt key does not silently give a user no password.
func ParseUsers(data []byte) ([]User, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var entries []UserEntry
	if err := dec.Decode(&entries); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, ErrNoUsers
	}
	users := make([]User, 0, len(entries))
	for i, e := range entries {
		u, err := e.user()
		if err != nil {
			name := cmp.Or(e.User, e.Nkey)
			return nil, fmt.Errorf("user %d (%q): %w", i+1, name, err)
		}
		users = append(users, u)
	}
	return users, nil
}

func (e UserEntry) user() (User, error) {
	n := 0
	for _, s := range []string{e.Password, e.PasswordHash, e.Nkey} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return User{}, fmt.Errorf("want exactly one of password, password_hash and nkey")
	}
	if e.Nkey == "" && e.User == "" {
		return User{}, fmt.Errorf("user is required with a password")
	}
	if e.Nkey != "" && e.User != "" {
		return User{}, fmt.Errorf("an nkey user has no user name: its key identifies it")
	}
	if e.PasswordHash != "" && !strings.HasPrefix(e.PasswordHash, "$2") {
		return User{}, fmt.Errorf("password_hash is not a bcrypt hash ($2a$…)")
	}
	if e.Nkey != "" && !nkeys.IsValidPublicUserKey(e.Nkey) {
		return User{}, fmt.Errorf("nkey is not a user's public key (U…)")
	}
	perms, err := RolePermissions(e.Role, cmp.Or(e.User, e.Nkey), e.Categories)
	if err != nil {
		return User{}, err
	}
	return User{Name: e.User, Password: cmp.Or(e.Password, e.PasswordHash), Nkey: e.Nkey, Role: e.Role, Permissions: perms}, nil
}
