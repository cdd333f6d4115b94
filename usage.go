package toolbus

// Usage counts a model's tokens: those of one response (gateway.Response.Usage), of a
// step or of a whole turn on the wire (bus.TurnStatus.Usage). It lives here, in the
// contract both the gateways and the bus import, so that the two speak of one type.
type Usage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
}

// Add adds u's tokens to the count.
func (c *Usage) Add(u Usage) {
	c.InputTokens += u.InputTokens
	c.OutputTokens += u.OutputTokens
}
