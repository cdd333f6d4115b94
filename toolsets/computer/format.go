package computer

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// formatSize renders a byte count the way people read it: 512 B, 2.1 KiB, 3.0 MiB.
func formatSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 4; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTP"[exp])
}

// formatDuration renders an elapsed time for labels: 350 ms, 2.1 s, 2 min 5 s.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	d = d.Round(time.Second)
	return fmt.Sprintf("%d min %d s", int(d.Minutes()), int(d.Seconds())%60)
}

// shortCommand is a one-line form of a command for labels.
func shortCommand(cmd string) string {
	first, _, multi := strings.Cut(strings.TrimSpace(cmd), "\n")
	s := strings.Join(strings.Fields(first), " ")
	const max = 60
	if utf8.RuneCountInString(s) > max {
		r := []rune(s)
		return string(r[:max-1]) + "…"
	}
	if multi {
		return s + " …"
	}
	return s
}

// validPrefix returns b without a trailing incomplete UTF-8 sequence.
func validPrefix(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}

// validSuffix returns b without leading UTF-8 continuation bytes.
func validSuffix(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}
