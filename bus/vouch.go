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
	macs sync.Pool // of hash.Hash: HMACs keyed once, reset for each use
}

// NewVoucher returns a voucher for key (VouchKeySize bytes).
func NewVoucher(key []byte) *Voucher {
	key = append([]byte(nil), key...)
	v := &Voucher{}
	v.macs.New = func() any { return hmac.New(sha256.New, key) }
	return v
}

// Vouch returns the vouch for a call of category's tool with args, validated against the
// schema whose SHA-256 is schemaSum.
func (v *Voucher) Vouch(category, tool string, schemaSum [sha256.Size]byte, args []byte) string {
	if v == nil {
		return ""
	}
	var sum [sha256.Size]byte
	var out [64]byte
	base64.RawURLEncoding.Encode(out[:vouchLen], v.sum(sum[:0], category, tool, schemaSum, args))
	return string(out[:vouchLen])
}

// Vouched reports whether vouch is the voucher's vouch for these arguments.
func (v *Voucher) Vouched(vouch, category, tool string, schemaSum [sha256.Size]byte, args []byte) bool {
	if v == nil || len(vouch) != vouchLen {
		return false
	}
	var got, sum [sha256.Size]byte
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(vouch)); err != nil || n != sha256.Size {
		return false
	}
	return hmac.Equal(got[:], v.sum(sum[:0], category, tool, schemaSum, args))
}

func (v *Voucher) sum(dst []byte, category, tool string, schemaSum [sha256.Size]byte, args []byte) []byte {
	mac := v.macs.Get().(hash.Hash)
	defer v.macs.Put(mac)
	mac.Reset()
	mac.Write([]byte(category))
	mac.Write([]byte{0})
	mac.Write([]byte(tool))
	mac.Write([]byte{0})
	mac.Write(schemaSum[:])
	mac.Write(args)
	return mac.Sum(dst)
}
