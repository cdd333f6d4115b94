package bus

import (
	"bytes"
	"crypto/sha256"
	"testing"
)

func TestVouch(t *testing.T) {
	t.Parallel()
	key := bytes.Repeat([]byte{7}, VouchKeySize)
	other := bytes.Repeat([]byte{8}, VouchKeySize)
	sum := sha256.Sum256([]byte(`{"type":"object"}`))
	otherSum := sha256.Sum256([]byte(`{"type":"object","required":["a"]}`))
	args := []byte(`{"path":"notes.txt"}`)
	vk, vo := NewVoucher(key), NewVoucher(other)
	v := vk.Vouch("computer", "read_file", sum, args)
	tests := []struct {
		name         string
		key          *Voucher
		vouch        string
		category, fn string
		sum          [sha256.Size]byte
		args         []byte
		want         bool
	}{
		{"same everything", vk, v, "computer", "read_file", sum, args, true},
		{"other arguments", vk, v, "computer", "read_file", sum, []byte(`{"path":"other.txt"}`), false},
		{"other schema", vk, v, "computer", "read_file", otherSum, args, false},
		{"other tool", vk, v, "computer", "write_file", sum, args, false},
		{"other category", vk, v, "fs", "read_file", sum, args, false},
		{"other key", vo, v, "computer", "read_file", sum, args, false},
		{"no key", nil, v, "computer", "read_file", sum, args, false},
		{"no vouch", vk, "", "computer", "read_file", sum, args, false},
		{"garbage", vk, "not-a-vouch", "computer", "read_file", sum, args, false},
		{"category and tool shifted", vk, vk.Vouch("comput", "erread_file", sum, args), "computer", "read_file", sum, args, false},
	}
	for _, tc := range tests {
		if got := tc.key.Vouched(tc.vouch, tc.category, tc.fn, tc.sum, tc.args); got != tc.want {
			t.Errorf("%s: Vouched = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func BenchmarkVouch(b *testing.B) {
	key := bytes.Repeat([]byte{7}, VouchKeySize)
	sum := sha256.Sum256([]byte(`{"type":"object"}`))
	args := []byte(`{"path":"notes.txt","content":"a line of text that a model wrote"}`)
	vk := NewVoucher(key)
	v := vk.Vouch("computer", "write_file", sum, args)
	b.ReportAllocs()
	for b.Loop() {
		if !vk.Vouched(v, "computer", "write_file", sum, args) {
			b.Fatal("not vouched")
		}
	}
}
