package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Patch is the RFC 6902 JSON patch that turns orig into mutated, touching
// only what changed; nil when nothing did.
//
// The API server applies it to the pod as it sent it, which may hold fields
// this build's k8s.io/api does not know (a newer cluster) and so are in
// neither encoding here. A plain index-by-index diff would go wrong exactly
// there: inserting the installer before the other init containers would
// rewrite each of them field by field into its neighbour, leaving every
// unknown field on the wrong container. So the diff here is shaped by what
// Mutate does:
//   - objects are diffed key by key, so unknown keys are never touched;
//     except an object that loses a key and gains another, a one-of such as
//     a preStop handler changing from httpGet to exec, which is replaced
//     whole so nothing of the old kind survives next to the new;
//   - arrays of equal length are diffed element by element;
//   - an array that only gained elements (the old one is a subsequence of
//     the new) gets one "add" per new element, at its final index;
//   - any other array change is one "replace" of the array.
func Patch(orig, mutated *corev1.Pod) ([]byte, error) {
	if orig == nil || mutated == nil {
		return nil, fmt.Errorf("inject: patch of a nil pod")
	}
	a, err := toJSONValue(orig)
	if err != nil {
		return nil, err
	}
	b, err := toJSONValue(mutated)
	if err != nil {
		return nil, err
	}
	var ops []operation
	diffValues(a, b, "", &ops)
	if len(ops) == 0 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// operation is one RFC 6902 operation; Value is left out of "remove".
type operation struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// toJSONValue is v's JSON encoding decoded generically, numbers kept as
// written so that nothing is compared through float64.
func toJSONValue(v any) (any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("inject: encoding the pod: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("inject: decoding the pod: %w", err)
	}
	return out, nil
}

func diffValues(a, b any, path string, ops *[]operation) {
	switch at := a.(type) {
	case map[string]any:
		if bt, ok := b.(map[string]any); ok {
			diffObjects(at, bt, path, ops)
			return
		}
	case []any:
		if bt, ok := b.([]any); ok {
			diffArrays(at, bt, path, ops)
			return
		}
	}
	if !reflect.DeepEqual(a, b) {
		*ops = append(*ops, valueOp("replace", path, b))
	}
}

func diffObjects(a, b map[string]any, path string, ops *[]operation) {
	var removed, added []string
	for k := range a {
		if _, ok := b[k]; !ok {
			removed = append(removed, k)
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			added = append(added, k)
		}
	}
	if len(removed) > 0 && len(added) > 0 && path != "" {
		*ops = append(*ops, valueOp("replace", path, b))
		return
	}
	slices.Sort(removed)
	slices.Sort(added)
	for _, k := range removed {
		*ops = append(*ops, operation{Op: "remove", Path: path + "/" + escape(k)})
	}
	for _, k := range added {
		*ops = append(*ops, valueOp("add", path+"/"+escape(k), b[k]))
	}
	keys := make([]string, 0, len(a))
	for k := range a {
		if _, ok := b[k]; ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		diffValues(a[k], b[k], path+"/"+escape(k), ops)
	}
}

func diffArrays(a, b []any, path string, ops *[]operation) {
	switch {
	case len(a) == len(b):
		for i := range a {
			diffValues(a[i], b[i], path+"/"+strconv.Itoa(i), ops)
		}
	case len(a) < len(b) && isSubsequence(a, b):
		// Ascending final indexes: after the adds before index i, the
		// array's first i elements are already b's.
		j := 0
		for i, v := range b {
			if j < len(a) && reflect.DeepEqual(a[j], v) {
				j++
				continue
			}
			*ops = append(*ops, valueOp("add", path+"/"+strconv.Itoa(i), v))
		}
	default:
		*ops = append(*ops, valueOp("replace", path, b))
	}
}

// isSubsequence reports whether a's elements appear in b in order; the
// greedy match is the one diffArrays then uses.
func isSubsequence(a, b []any) bool {
	j := 0
	for _, v := range b {
		if j < len(a) && reflect.DeepEqual(a[j], v) {
			j++
		}
	}
	return j == len(a)
}

func valueOp(op, path string, v any) operation {
	raw, err := json.Marshal(v)
	if err != nil {
		// v came out of json.Decoder: it always encodes.
		panic(fmt.Sprintf("inject: re-encoding a decoded JSON value: %v", err))
	}
	return operation{Op: op, Path: path, Value: raw}
}

// escape makes an object key a JSON pointer token (RFC 6901): annotation
// keys such as draingate.dev/injected hold a "/".
func escape(k string) string {
	return pointerEscaper.Replace(k)
}

// pointerEscaper is built once: a Replacer prepares its tables on first
// use, which cost more than the rest of a review's patch when done per key.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")
