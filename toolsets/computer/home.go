package computer

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/toolbus/toolbus"
)

// home is an agent's home directory, opened for one call.
type home struct {
	given string   // the home as configured, absolute and clean
	dir   string   // the home with symbolic links resolved
	root  *os.Root // every file operation goes through it
}

// openHome opens the call's home, creating it when it does not exist yet. Its errors are
// configuration faults of the host, not mistakes of the model.
func (c Config) openHome(call toolbus.Call) (*home, error) {
	dir := call.Home
	if dir == "" {
		if c.HomeRoot == "" {
			return nil, errors.New("this call has no agent home: the category host sets Call.Home or Config.HomeRoot")
		}
		if !isPathElement(call.Agent) {
			return nil, fmt.Errorf("agent id %q cannot name a home directory", call.Agent)
		}
		dir = filepath.Join(c.HomeRoot, call.Agent)
	}
	given, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("agent home %s: %w", dir, err)
	}
	var rootReal string
	if c.HomeRoot != "" {
		rootAbs, err := filepath.Abs(c.HomeRoot)
		if err != nil {
			return nil, fmt.Errorf("home root %s: %w", c.HomeRoot, err)
		}
		if !within(rootAbs, given) {
			return nil, fmt.Errorf("agent home %s is outside the home root %s", given, rootAbs)
		}
		if err := os.MkdirAll(rootAbs, 0o755); err != nil {
			return nil, fmt.Errorf("create home root: %w", err)
		}
		if rootReal, err = filepath.EvalSymlinks(rootAbs); err != nil {
			return nil, fmt.Errorf("home root %s: %w", rootAbs, err)
		}
	}
	if err := os.MkdirAll(given, 0o700); err != nil {
		return nil, fmt.Errorf("create agent home: %w", err)
	}
	real, err := filepath.EvalSymlinks(given)
	if err != nil {
		return nil, fmt.Errorf("agent home %s: %w", given, err)
	}
	if rootReal != "" && !within(rootReal, real) {
		return nil, fmt.Errorf("agent home %s resolves to %s, outside the home root %s", given, real, rootReal)
	}
	root, err := os.OpenRoot(real)
	if err != nil {
		return nil, fmt.Errorf("open agent home: %w", err)
	}
	return &home{given: given, dir: real, root: root}, nil
}

func (h *home) Close() error { return h.root.Close() }

// target is a path inside the home.
type target struct {
	shown string // as the model should write it: relative to the home, slash-separated
	rel   string // relative to the resolved home with links resolved, for h.root
	abs   string // absolute, links resolved
}

// stat resolves p (see resolve) and stats what it names, its errors worded for the model.
func (h *home) stat(p string) (target, fs.FileInfo, error) {
	t, err := h.resolve(p)
	if err != nil {
		return target{}, nil, err
	}
	fi, err := h.root.Stat(t.rel)
	if err != nil {
		return target{}, nil, describe(t, err)
	}
	return t, fi, nil
}

// openStat opens the call's home and stats p in it (home.stat). The caller closes the
// home; on an error it is closed already.
func (c Config) openStat(call toolbus.Call, p string) (*home, target, fs.FileInfo, error) {
	h, err := c.openHome(call)
	if err != nil {
		return nil, target{}, nil, err
	}
	t, fi, err := h.stat(p)
	if err != nil {
		h.Close()
		return nil, target{}, nil, err
	}
	return h, t, fi, nil
}

// errOutside is the error for a path that leaves the home; the message is for the model.
func errOutside(p string, viaLink bool) error {
	if viaLink {
		return fmt.Errorf("path %s is outside the agent home: it goes through a symbolic link that points out of the home; use a path inside the home", p)
	}
	return fmt.Errorf("path %s is outside the agent home; use a path relative to the home, such as \"notes.md\" or \"src/main.go\"", p)
}

// resolve confines p to the home. It refuses absolute paths outside the home, ".."
// escapes, and paths whose deepest existing part resolves outside the home through a
// symbolic link. The part of the path that does not exist yet is kept as written.
func (h *home) resolve(p string) (target, error) {
	if p == "" {
		p = "."
	}
	if strings.IndexByte(p, 0) >= 0 {
		return target{}, fmt.Errorf("path %q holds a NUL byte", p)
	}
	var abs string
	switch {
	case !filepath.IsAbs(p):
		abs = filepath.Join(h.dir, p)
	case within(h.dir, filepath.Clean(p)):
		abs = filepath.Clean(p)
	case within(h.given, filepath.Clean(p)):
		// An absolute path may spell the home as configured rather than resolved.
		rel, _ := filepath.Rel(h.given, filepath.Clean(p))
		abs = filepath.Join(h.dir, rel)
	default:
		return target{}, errOutside(p, false)
	}
	if !within(h.dir, abs) {
		return target{}, errOutside(p, false)
	}
	shownRel, _ := filepath.Rel(h.dir, abs)
	shown := filepath.ToSlash(shownRel)

	// Resolve links in the deepest part of the path that exists.
	existing, rest := abs, ""
	for {
		_, err := os.Lstat(existing)
		if err == nil {
			break
		}
		if errors.Is(err, syscall.ENOTDIR) {
			return target{}, fmt.Errorf("path %s: a parent of it is a file, not a directory", shown)
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return target{}, fmt.Errorf("path %s: %w", shown, pathErr(err))
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = filepath.Dir(existing)
	}
	real, err := filepath.EvalSymlinks(existing)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return target{}, fmt.Errorf("path %s goes through a broken symbolic link", shown)
	case err != nil:
		return target{}, fmt.Errorf("path %s: %w", shown, pathErr(err))
	case !within(h.dir, real):
		return target{}, errOutside(p, true)
	}
	final := filepath.Join(real, rest)
	rel, _ := filepath.Rel(h.dir, final)
	return target{shown: shown, rel: rel, abs: final}, nil
}

// within reports whether p is base or lies under it; both are absolute and clean.
func within(base, p string) bool {
	rel, err := filepath.Rel(base, p)
	if err != nil {
		return false
	}
	return rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// isPathElement reports whether s is one plain path element.
func isPathElement(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, `/\`) && strings.IndexByte(s, 0) < 0
}

// pathErr strips the absolute path from an *fs.PathError: the model knows the path by the
// name it used, and host paths are none of its business.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// describe turns a file-system error on t into a sentence the model can act on.
func describe(t target, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s does not exist", t.shown)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("permission denied on %s", t.shown)
	case errors.Is(err, syscall.ENOTDIR):
		return fmt.Errorf("path %s: a parent of it is a file, not a directory", t.shown)
	}
	return fmt.Errorf("%s: %w", t.shown, pathErr(err))
}

// display names a target in labels and messages.
func display(shown string) string {
	if shown == "." || shown == "" {
		return "the home directory"
	}
	return shown
}
