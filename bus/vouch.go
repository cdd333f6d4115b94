package bus

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
)

// HeaderVouch carries a turn's vouch for a call's arguments (see [Vouch]).
const HeaderVouch = "Toolbus-Vouch"

// VouchKeySize is the size of a vouch key.
const VouchKeySize = 32

// Vouch is what a turn sends with a call whose arguments it validated: a MAC, under a key
// the turn shares with the hosts of its deployment, over the tool, the sum of the schema it
// validated against, and the arguments. A host that holds the key and computes the same
// value for its own schema may skip validating again; any other request (another
// deployment's turn, a request by hand, a vouch that does not match) is validated in full.
// The key never travels: a node makes one per process, or reads one operators share
// among the nodes of a deployment.
func Vouch(key []byte, category, tool string, schemaSum [sha256.Size]byte, args []byte) string {
	var out [sha256.Size]byte
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(category))
	mac.Write([]byte{0})
	mac.Write([]byte(tool))
	mac.Write([]byte{0})
	mac.Write(schemaSum[:])
	mac.Write(args)
	return base64.RawURLEncoding.EncodeToString(mac.Sum(out[:0]))
}

// Vouched reports whether vouch is the turn's MAC for these arguments under key.
func Vouched(key []byte, vouch, category, tool string, schemaSum [sha256.Size]byte, args []byte) bool {
	if len(key) == 0 || len(vouch) != base64.RawURLEncoding.EncodedLen(sha256.Size) {
		return false
	}
	return hmac.Equal([]byte(vouch), []byte(Vouch(key, category, tool, schemaSum, args)))
}
