package toolbus

// Usage counts a model's tokens: those of one response (gateway.Response.Usage), of a
// step or of a whole turn on the wire (bus.TurnStatus.Usage). It lives here, in the
// contract both the gateways and the bus import, so that the two speak of one type.
type Usage struct {
	// InputTokens are all the tokens the model read, those it read from or wrote to
	// a prompt cache included.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheCreationInputTokens and CacheReadInputTokens are the part of InputTokens
	// the provider wrote to its prompt cache and read from it (the Anthropic API's
	// cache_creation_input_tokens and cache_read_input_tokens).
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens,omitempty"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens,omitempty"`
}

// Add adds u's tokens to the count.
func (c *Usage) Add(u Usage) {
	c.InputTokens += u.InputTokens
	c.OutputTokens += u.OutputTokens
	c.CacheCreationInputTokens += u.CacheCreationInputTokens
	c.CacheReadInputTokens += u.CacheReadInputTokens
}
