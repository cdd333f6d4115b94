package main

import (
	"strings"
	"testing"
)

// A mistyped flag is answered with the flag meant (edit distance at most 2 over the
// command's flags), on every command and on `toolbus node`; one near nothing gets none.
func TestDidYouMeanFlag(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "-modle", "script:x", "hi"}, "did you mean -model?"},
		{[]string{"run", "--max-step", "3", "hi"}, "did you mean -max-steps?"},
		{[]string{"tools", "-jsno"}, "did you mean -json?"},
		{[]string{"call", "-hoem", ".", "read_file"}, "did you mean -home?"},
		{[]string{"node", "-lisen", "127.0.0.1:4222"}, "did you mean -listen?"},
		{[]string{"watch", "-servr", "nats://127.0.0.1:1"}, "did you mean -server?"},
		{[]string{"tools", "-frobnicate"}, ""},
	} {
		code, _, stderr := cli(ctx, c.args...)
		if code != exitUsage || !strings.Contains(stderr, "flag provided but not defined") {
			t.Errorf("%v: exit %d, stderr %q", c.args, code, stderr)
			continue
		}
		if c.want == "" {
			if strings.Contains(stderr, "did you mean") {
				t.Errorf("%v suggests a flag near nothing: %q", c.args, stderr)
			}
			continue
		}
		if !strings.Contains(stderr, "\n"+c.want+"\n") {
			t.Errorf("%v: stderr lacks the line %q:\n%s", c.args, c.want, stderr)
		}
	}
	if _, _, stderr := cli(ctx, "wacth"); !strings.Contains(stderr, `unknown command "wacth" (did you mean watch?)`) {
		t.Errorf("a mistyped command: %q", stderr)
	}
}

// A mistyped tool is answered with the tool meant, the catalog's names within an edit
// distance of 2: by `toolbus call`, from the bus's catalog, and to the model, by the
// turn that refuses its call.
func TestDidYouMeanTool(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	code, _, stderr := cli(ctx, "call", "-home", demoHome, "read_fil", `{"path":"README.md"}`)
	if code != exitFailed || !strings.Contains(stderr, `unknown tool "read_fil" (did you mean read_file?); the tools served on the embedded bus are: `) {
		t.Errorf("call read_fil: exit %d, stderr:\n%s", code, stderr)
	}
	code, _, stderr = cli(ctx, "call", "-home", demoHome, "frobnicate", `{}`)
	if code != exitFailed || !strings.Contains(stderr, `unknown tool "frobnicate"; the tools served`) {
		t.Errorf("call frobnicate: exit %d, stderr:\n%s", code, stderr)
	}

	// The model's call of read_fil: the turn's refusal, which the model reads, says it too.
	script := writeScript(t, `{"responses": [
		{"calls": [{"id": "c1", "name": "read_fil", "arguments": "{\"path\": \"README.md\"}"}]},
		{"text": "I meant read_file."}]}`)
	code, stdout, stderr := cli(ctx, "run", "-json", "-home", demoHome, "-model", "script:"+script, "read the README")
	if code != exitOK {
		t.Fatalf("run: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stdout, `unknown tool \"read_fil\" (did you mean read_file?); the tools available are: `) {
		t.Errorf("the refused call's output lacks the suggestion:\n%s", stdout)
	}
}
