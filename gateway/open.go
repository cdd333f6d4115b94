package gateway

import (
	"fmt"
	"strings"
)

// Open returns the model a -model spec names:
//
//	script:FILE    a Scripted model playing FILE (see [LoadScript])
//	openai:MODEL   the OpenAI Responses API, or any endpoint speaking it (cfg.BaseURL)
//	chat:MODEL     the Chat Completions API, e.g. a local Ollama, vLLM, llama.cpp or
//	               LM Studio server at cfg.BaseURL
//	anthropic:MODEL  the Anthropic Messages API, or any endpoint speaking it
//	               (cfg.BaseURL, else cfg.AnthropicBaseURL)
//
// Any other spec yields an error wrapping ErrUnknownModel.
func Open(spec string, cfg Config) (Model, error) {
	kind, name, ok := strings.Cut(spec, ":")
	if ok && name == "" {
		return nil, fmt.Errorf("model spec %q names no model after %q", spec, kind+":")
	}
	switch {
	case ok && kind == "script":
		m, err := LoadScript(name)
		if err != nil {
			return nil, err
		}
		m.noStream = cfg.NoStream
		return m, nil
	case ok && kind == "openai":
		return NewResponses(name, cfg)
	case ok && kind == "chat":
		return NewChat(name, cfg)
	case ok && kind == "anthropic":
		return NewAnthropic(name, cfg)
	}
	return nil, fmt.Errorf("%w %q: want script:FILE, openai:MODEL (Responses API), chat:MODEL (Chat Completions, with -base-url) or anthropic:MODEL (Messages API)", ErrUnknownModel, spec)
}
