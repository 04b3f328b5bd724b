package limits

import (
	"strings"
	"testing"
)

func attrs(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m["k"+strings.Repeat("x", i)] = "v"
	}
	return m
}

func TestCheckMessage(t *testing.T) {
	bad := string([]byte{0xff, 0xfe})
	cases := []struct {
		name  string
		data  []byte
		attrs map[string]string
		key   string
		limit string // "" = valid
	}{
		{"data only", []byte("x"), nil, "", ""},
		{"attributes only", nil, map[string]string{"a": "b"}, "", ""},
		{"empty", nil, nil, "", "empty message"},
		{"data at the limit", make([]byte, MaxDataBytes), nil, "", ""},
		{"data over the limit", make([]byte, MaxDataBytes+1), nil, "", "message size"},
		{"100 attributes", nil, attrs(100), "", ""},
		{"101 attributes", nil, attrs(101), "", "attributes per message"},
		{"key of 256 bytes", nil, map[string]string{strings.Repeat("k", 256): "v"}, "", ""},
		{"key of 300 bytes", nil, map[string]string{strings.Repeat("k", 300): "v"}, "", "attribute key size"},
		{"value of 1024 bytes", nil, map[string]string{"k": strings.Repeat("v", 1024)}, "", ""},
		{"value of 2000 bytes", nil, map[string]string{"k": strings.Repeat("v", 2000)}, "", "attribute value size"},
		{"multibyte value over in bytes", nil, map[string]string{"k": strings.Repeat("é", 513)}, "", "attribute value size"},
		{"goog key", nil, map[string]string{"googfoo": "v"}, "", "reserved attribute key"},
		{"googclient_ key (Google's clients' trace context)", nil, map[string]string{"googclient_traceparent": "v"}, "", ""},
		{"empty key", []byte("x"), map[string]string{"": "v"}, "", "attribute key"},
		{"invalid UTF-8 key", nil, map[string]string{bad: "v"}, "", "UTF-8"},
		{"invalid UTF-8 value", nil, map[string]string{"k": bad}, "", "UTF-8"},
		{"ordering key of 1024 bytes", []byte("x"), nil, strings.Repeat("o", 1024), ""},
		{"ordering key of 2000 bytes", []byte("x"), nil, strings.Repeat("o", 2000), "ordering key size"},
		{"invalid UTF-8 ordering key", []byte("x"), nil, bad, "UTF-8"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := CheckMessage(c.data, c.attrs, c.key)
			switch {
			case c.limit == "" && v != nil:
				t.Fatalf("valid message refused: %v", v)
			case c.limit != "" && v == nil:
				t.Fatalf("want a %q violation, got none", c.limit)
			case c.limit != "" && v.Limit != c.limit:
				t.Fatalf("violation %q (%v), want %q", v.Limit, v, c.limit)
			case v != nil && (!strings.Contains(v.Error(), v.Field) || v.ServiceMessage() == ""):
				t.Fatalf("error %q must name the field %q and have a service message", v.Error(), v.Field)
			}
		})
	}
}

func TestCheckName(t *testing.T) {
	cases := []struct {
		kind, name string
		ok         bool
	}{
		{Subscriptions, "projects/my-project/subscriptions/orders", true},
		{Topics, "projects/p/topics/abc", true},
		{Topics, "projects/example.com:proj/topics/a-b_c.d~e+f%g", true},
		{Topics, "projects/p/topics/" + "a" + strings.Repeat("b", 254), true},
		{Topics, "projects/p/topics/" + "a" + strings.Repeat("b", 255), false},
		{Topics, "projects/p/topics/ab", false},
		{Topics, "projects/p/topics/has space", false},
		{Topics, "projects/p/topics/1abc", false},
		{Topics, "projects/p/topics/google-topic", false},
		{Topics, "projects/p/topics/GOOGLE", false},
		{Topics, "projects/p/subscriptions/abc", false},
		{Topics, "projects//topics/abc", false},
		{Topics, "projects/P/topics/abc", false},
		{Topics, "projects/p-/topics/abc", false},
		{Topics, "projects/p/topics/abc/extra", false},
		{Topics, "", false},
		{Subscriptions, "abc", false},
	}
	for _, c := range cases {
		err := CheckName(c.kind, c.name)
		if (err == nil) != c.ok {
			t.Errorf("CheckName(%s, %q) = %v, want ok=%v", c.kind, c.name, err, c.ok)
		}
		if err != nil && !strings.Contains(err.Error(), c.name) {
			t.Errorf("error %q does not name %q", err, c.name)
		}
	}
}
