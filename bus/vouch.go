package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"hash"
	"sync"
)

// HeaderVouch carries a turn's vouch for a call's arguments (see [Voucher]).
const HeaderVouch = "Toolbus-Vouch"

// VouchKeySize is the size of a vouch key.
const VouchKeySize = 32

// vouchLen is the length of a vouch: an HMAC-SHA256 in unpadded base64url.
var vouchLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// A Voucher makes and checks vouches. A vouch is what a turn sends with a call whose
// arguments it validated: a MAC, under a key the turn shares with the hosts of its
// deployment, over the tool, the sum of the schema it validated against, and the
// arguments. A host that holds the key and computes the same value for its own schema may
// skip validating again; any other request (another deployment's turn, a request by hand,
// a vouch that does not match) is validated in full. The key never travels: a node makes
// one per process, or reads one operators share among the nodes of a deployment.
//
// A nil Voucher vouches for nothing and accepts no vouch.
type Voucher struct {
	macs sync.Pool // of *voucherMAC: HMACs keyed once, reset for each use
}

// voucherMAC is a keyed HMAC and the scratch its message prefix is built in: bytes
// written through the hash.Hash interface escape, and would be allocated per vouch.
type voucherMAC struct {
	hash.Hash
	prefix []byte
	sum    []byte
}

// NewVoucher returns a voucher for key (VouchKeySize bytes).
func NewVoucher(key []byte) *Voucher {
	key = append([]byte(nil), key...)
	v := &Voucher{}
	v.macs.New = func() any {
		return &voucherMAC{Hash: hmac.New(sha256.New, key), prefix: make([]byte, 0, 128), sum: make([]byte, 0, sha256.Size)}
	}
	return v
}

// Vouch returns the vouch for a call of category's tool with args, validated against the
// schema whose SHA-256 is schemaSum.
func (v *Voucher) Vouch(category, tool string, schemaSum [sha256.Size]byte, args []byte) string {
	if v == nil {
		return ""
	}
	sum := v.sum(category, tool, schemaSum, args)
	var out [64]byte
	base64.RawURLEncoding.Encode(out[:vouchLen], sum[:])
	return string(out[:vouchLen])
}

// Vouched reports whether vouch is the voucher's vouch for these arguments.
func (v *Voucher) Vouched(vouch, category, tool string, schemaSum [sha256.Size]byte, args []byte) bool {
	if v == nil || len(vouch) != vouchLen {
		return false
	}
	var got [sha256.Size]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(vouch)); err != nil || n != sha256.Size {
		return false
	}
	sum := v.sum(category, tool, schemaSum, args)
	return hmac.Equal(got[:], sum[:])
}

func (v *Voucher) sum(category, tool string, schemaSum [sha256.Size]byte, args []byte) (sum [sha256.Size]byte) {
	mac := v.macs.Get().(*voucherMAC)
	defer v.macs.Put(mac)
	mac.Reset()
	p := append(mac.prefix[:0], category...)
	p = append(p, 0)
	p = append(p, tool...)
	p = append(p, 0)
	p = append(p, schemaSum[:]...)
	mac.prefix = p
	mac.Write(p)
	mac.Write(args)
	mac.sum = mac.Sum(mac.sum[:0])
	copy(sum[:], mac.sum)
	return sum
}
