package jsonfast

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// decodeStd is what the fast reader must match: one value, numbers kept as text, nothing
// but white space after it.
func decodeStd(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one JSON value")
	}
	return v, nil
}

// encodeStd is what AppendValue must match.
func encodeStd(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

var valueCases = []string{
	`{}`, `[]`, `null`, `true`, ` false `, `0`, `-0`, `-1.5e+300`, `1E-2`, `"x"`,
	`{"path":"src/main.go","mode":"read","limit":200,"tags":["go","main"],"options":{"recursive":false}}`,
	`{"b":1,"a":2,"a":3}`,
	`{"s":"quotes \" \\ \/ \b\f\n\r\t \u00e9 \u0000 <b>&amp;</b> é 😀 \u2028"}`,
	`{"deep":[[[[{"x":[null,true,{"y":"z"}]}]]]]}`,
	"{\"bad\":\"\xff\"}", `{"sur":"\ud83d\ude00"}`, `{"x":01}`, `{"x":1.}`, `{"x":.5}`, `{"x":+1}`,
	`{"x":1,}`, `{"x" 1}`, `[1,2`, `{"a":1} {"b":2}`, `{"a":1} x`, ``, ` `, `nul`, `"tab	in"`, `{"x":"\q"}`,
}

// TestDecodeValue: what DecodeValue reads equals encoding/json's reading; what it declines,
// encoding/json reads too or refuses.
func TestDecodeValue(t *testing.T) {
	t.Parallel()
	accepted := 0
	for _, in := range valueCases {
		if checkValue(t, []byte(in)) {
			accepted++
		}
	}
	if accepted < 14 {
		t.Errorf("DecodeValue read %d of the cases, want the usual ones read by hand", accepted)
	}
}

func checkValue(t *testing.T, in []byte) bool {
	t.Helper()
	got, ok := DecodeValue(in)
	want, err := decodeStd(in)
	// Skip reads what DecodeValue reads, and declines what it declines.
	sk := Scanner{B: in}
	if skipped := sk.Skip() && sk.End(); skipped != ok {
		t.Fatalf("Skip(%q) read it: %v, DecodeValue: %v", in, skipped, ok)
	}
	if !ok {
		return false
	}
	if err != nil {
		t.Fatalf("DecodeValue(%q) = %#v, encoding/json refuses it: %v", in, got, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("DecodeValue(%q):\n got %#v\nwant %#v", in, got, want)
	}
	// And writing it back matches encoding/json too.
	enc, eok := AppendValue(nil, got)
	std, serr := encodeStd(got)
	if !eok || serr != nil || !bytes.Equal(enc, std) {
		t.Fatalf("AppendValue(%#v) = %s %v, encoding/json: %s %v", got, enc, eok, std, serr)
	}
	return true
}

func FuzzDecodeValue(f *testing.F) {
	for _, in := range valueCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { checkValue(t, in) })
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quotes \" \\ <b>&</b> \n\t\r\b\f \x01 \x7f é 😀 \u2028\u2029 bad\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s, true); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q, true) = %s, json.Marshal: %s", s, got, want)
		}
		want, _ = encodeStd(s)
		if got := AppendString(nil, s, false); !bytes.Equal(got, want) {
			t.Fatalf("AppendString(%q, false) = %s, Encoder without HTML escaping: %s", s, got, want)
		}
	})
}

// BenchmarkArguments decodes and re-encodes typical tool arguments, against encoding/json.
func BenchmarkArguments(b *testing.B) {
	in := []byte(valueCases[10])
	b.Run("jsonfast", func(b *testing.B) {
		b.ReportAllocs()
		buf := make([]byte, 0, 256)
		for b.Loop() {
			v, _ := DecodeValue(in)
			buf, _ = AppendValue(buf[:0], v)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			v, _ := decodeStd(in)
			_, _ = encodeStd(v)
		}
	})
}
