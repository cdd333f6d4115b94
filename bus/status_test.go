package bus

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEncodeStatusFits(t *testing.T) {
	t.Parallel()
	calls := func(n, details int) []CallRecord {
		cs := make([]CallRecord, n)
		for i := range cs {
			cs[i] = CallRecord{Call: "c" + strings.Repeat("x", 10), Tool: "list_files", Outcome: OutcomeOK}
			if details > 0 {
				cs[i].Details = json.RawMessage(`"` + strings.Repeat("d", details) + `"`)
			}
		}
		return cs
	}
	for _, tc := range []struct {
		name          string
		st            TurnStatus
		limit         int
		wantCalls     int  // calls kept; -1: any, as long as some were omitted
		wantDetails   bool // details kept
		wantTextCut   bool
		wantUnchanged bool
	}{
		{"small", TurnStatus{State: TurnCompleted, Calls: calls(3, 10)}, 1 << 20, 3, true, false, true},
		{"no limit", TurnStatus{State: TurnCompleted, Calls: calls(3000, 1000)}, 0, 3000, true, false, true},
		{"details go first", TurnStatus{State: TurnCompleted, Calls: calls(100, 2000)}, 20_000, 100, false, false, false},
		{"then the earliest calls", TurnStatus{State: TurnCompleted, Calls: calls(2000, 600)}, 64 << 10, -1, false, false, false},
		{"then the text", TurnStatus{State: TurnCompleted, Text: strings.Repeat("é", 40_000)}, 10_000, 0, false, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := EncodeStatus(tc.st, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if tc.limit > 0 && len(b) > tc.limit {
				t.Fatalf("%d bytes, over the limit %d", len(b), tc.limit)
			}
			var got TurnStatus
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.State != tc.st.State || got.NumCalls() != len(tc.st.Calls) {
				t.Errorf("state %s, %d calls accounted for; want %s, %d", got.State, got.NumCalls(), tc.st.State, len(tc.st.Calls))
			}
			switch {
			case tc.wantCalls >= 0 && len(got.Calls) != tc.wantCalls:
				t.Errorf("%d calls kept, want %d", len(got.Calls), tc.wantCalls)
			case tc.wantCalls < 0 && (got.CallsOmitted == 0 || len(got.Calls) == 0):
				t.Errorf("kept %d, omitted %d: want some of each", len(got.Calls), got.CallsOmitted)
			}
			if len(got.Calls) > 0 && (got.Calls[0].Details != nil) != tc.wantDetails {
				t.Errorf("details kept: %v, want %v", got.Calls[0].Details != nil, tc.wantDetails)
			}
			if cut := strings.HasSuffix(got.Text, "[cut: the whole text is in the transcript]"); cut != tc.wantTextCut {
				t.Errorf("text cut %v, want %v", cut, tc.wantTextCut)
			}
			if tc.wantUnchanged && got.CallsOmitted != 0 {
				t.Errorf("omitted %d", got.CallsOmitted)
			}
		})
	}
}
