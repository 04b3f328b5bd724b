package limits

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Violation is a message that breaks one of the service's limits. Its
// Error is worded for a caller of this module; ServiceMessage is the
// service's own INVALID_ARGUMENT wording for the same fault.
type Violation struct {
	// Limit names the broken rule, e.g. "attribute value size".
	Limit string
	// Field is the message field at fault, e.g. `Attributes["k"]`.
	Field string
	// Detail says what was found, e.g. "2000 bytes, the limit is 1024".
	Detail string
	// service is the service's wording of the same fault.
	service string
}

// Error returns "FIELD: LIMIT: DETAIL".
func (v *Violation) Error() string {
	return fmt.Sprintf("%s: %s: %s", v.Field, v.Limit, v.Detail)
}

// ServiceMessage is the message of the service's INVALID_ARGUMENT status
// for this fault.
func (v *Violation) ServiceMessage() string { return v.service }

const quotas = " Refer to https://cloud.google.com/pubsub/quotas for more information."

// CheckMessage reports the first limit a message to publish breaks, or
// nil. It checks what the service checks per message: non-empty, data
// size, attribute count, each attribute's key and value (size, UTF-8, the
// reserved prefix, an empty key) and the ordering key (size, UTF-8). The
// request size is the caller's to check. Attributes are checked in key
// order, so the same message always reports the same fault.
func CheckMessage(data []byte, attrs map[string]string, orderingKey string) *Violation {
	if len(data) == 0 && len(attrs) == 0 {
		return &Violation{Limit: "empty message", Field: "Data", Detail: "neither data nor attributes",
			service: "Some messages contain neither data nor attributes."}
	}
	if len(data) > MaxDataBytes {
		return &Violation{Limit: "message size", Field: "Data",
			Detail:  fmt.Sprintf("%d bytes, the limit is %d", len(data), MaxDataBytes),
			service: fmt.Sprintf("A message in the request is too large. Its data is %d bytes, but the maximum allowed is %d.%s", len(data), MaxDataBytes, quotas)}
	}
	if len(attrs) > MaxAttributes {
		return &Violation{Limit: "attributes per message", Field: "Attributes",
			Detail:  fmt.Sprintf("%d attributes, the limit is %d", len(attrs), MaxAttributes),
			service: fmt.Sprintf("A message in the request has too many attributes. It has %d, but the maximum allowed is %d.%s", len(attrs), MaxAttributes, quotas)}
	}
	if len(attrs) > 0 {
		if v := checkAttributes(attrs); v != nil {
			return v
		}
	}
	return CheckOrderingKey(orderingKey)
}

// CheckOrderingKey reports an ordering key over MaxOrderingKeyBytes or not
// valid UTF-8, or nil.
func CheckOrderingKey(key string) *Violation {
	if len(key) > MaxOrderingKeyBytes {
		return &Violation{Limit: "ordering key size", Field: "OrderingKey",
			Detail:  fmt.Sprintf("%d bytes, the limit is %d", len(key), MaxOrderingKeyBytes),
			service: fmt.Sprintf("A message in the request has an ordering key that is too long. The length is %d characters, but the maximum allowed is %d.%s", len(key), MaxOrderingKeyBytes, quotas)}
	}
	if !utf8.ValidString(key) {
		return &Violation{Limit: "UTF-8", Field: "OrderingKey", Detail: "not valid UTF-8",
			service: "A message in the request has an ordering key that is not valid UTF-8."}
	}
	return nil
}

func checkAttributes(attrs map[string]string) *Violation {
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if v := checkAttribute(k, attrs[k]); v != nil {
			return v
		}
	}
	return nil
}

func checkAttribute(k, val string) *Violation {
	field := fmt.Sprintf("Attributes[%q]", k)
	switch {
	case k == "":
		return &Violation{Limit: "attribute key", Field: field, Detail: "empty key",
			service: "The attribute \"\" in the request has an empty key."}
	case len(k) > MaxAttributeKeyBytes:
		return &Violation{Limit: "attribute key size", Field: field,
			Detail:  fmt.Sprintf("key of %d bytes, the limit is %d", len(k), MaxAttributeKeyBytes),
			service: fmt.Sprintf("The attribute %q in the request has a key that is too long. The length is %d characters, but the maximum allowed is %d.%s", short(k), len(k), MaxAttributeKeyBytes, quotas)}
	case !utf8.ValidString(k):
		return &Violation{Limit: "UTF-8", Field: field, Detail: "key is not valid UTF-8",
			service: "The attribute key in the request is not valid UTF-8."}
	case strings.HasPrefix(k, ReservedPrefix) && !strings.HasPrefix(k, ClientAttributePrefix):
		return &Violation{Limit: "reserved attribute key", Field: field, Detail: "keys starting with \"goog\" are reserved",
			service: fmt.Sprintf("The attribute %q in the request has a key that starts with the reserved prefix \"goog\".", k)}
	case len(val) > MaxAttributeValueBytes:
		return &Violation{Limit: "attribute value size", Field: field,
			Detail:  fmt.Sprintf("value of %d bytes, the limit is %d", len(val), MaxAttributeValueBytes),
			service: fmt.Sprintf("The attribute %q in the request has a value that is too long. The length is %d characters, but the maximum allowed is %d.%s", k, len(val), MaxAttributeValueBytes, quotas)}
	case !utf8.ValidString(val):
		return &Violation{Limit: "UTF-8", Field: field, Detail: "value is not valid UTF-8",
			service: fmt.Sprintf("The attribute %q in the request has a value that is not valid UTF-8.", k)}
	}
	return nil
}

// short keeps a too-long key readable in an error.
func short(k string) string {
	if len(k) <= 64 {
		return k
	}
	return k[:64] + "…"
}
