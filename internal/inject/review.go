package inject

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"draingate.dev/draingate/api"
)

// Reading and answering AdmissionReviews of either version, also when a
// body is too large or too broken to decode whole: the webhook then still
// finds the request's uid, so that it can admit the pod unchanged.

// reviewType answers in the request's version (the API server requires
// it), v1 when unknown.
func reviewType(apiVersion string) metav1.TypeMeta {
	if !knownVersion(apiVersion) {
		apiVersion = admissionV1
	}
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: reviewKind}
}

func knownVersion(v string) bool { return v == admissionV1 || v == admissionV1beta1 }

// head is the least of an AdmissionReview needed to answer it.
type head struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Request    struct {
		UID types.UID `json:"uid"`
	} `json:"request"`
}

// reviewHead reads what identifies a review from a body whose full decode
// failed: ok when it is an AdmissionReview with a request uid.
func reviewHead(body []byte) (head, bool) {
	var h head
	if err := json.Unmarshal(body, &h); err != nil {
		return h, false
	}
	return h, h.Kind == reviewKind && knownVersion(h.APIVersion) && h.Request.UID != ""
}

// tooLarge answers a body over MaxReviewBytes: admitted unchanged when its
// uid shows in the part read, else 413.
func tooLarge(prefix []byte) (*admissionv1.AdmissionReview, *httpError) {
	apiVersion, uid := scanUID(prefix)
	if uid == "" {
		return nil, &httpError{http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes, and no request uid in its first part", MaxReviewBytes)}
	}
	return allow(apiVersion, uid, fmt.Sprintf("%snot injected: the admission request is larger than %d MiB", warnPrefix, MaxReviewBytes>>20)), nil
}

// scanUID walks the JSON tokens of a truncated AdmissionReview for
// apiVersion and request.uid, stopping where the text ends or breaks.
func scanUID(prefix []byte) (apiVersion string, uid types.UID) {
	dec := json.NewDecoder(bytes.NewReader(prefix))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", ""
		}
		switch key {
		case "apiVersion":
			var v string
			if dec.Decode(&v) != nil {
				return "", ""
			}
			apiVersion = v
		case "request":
			return apiVersion, scanRequestUID(dec)
		default:
			if skipValue(dec) != nil {
				return "", ""
			}
		}
	}
	return "", ""
}

func scanRequestUID(dec *json.Decoder) types.UID {
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "uid" {
			var uid string
			if dec.Decode(&uid) != nil {
				return ""
			}
			return types.UID(uid)
		}
		if skipValue(dec) != nil {
			return ""
		}
	}
	return ""
}

// skipValue consumes one JSON value token by token, so a large one costs no
// more memory than its largest string.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		switch t {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// short bounds an error in a warning: the API server truncates long
// warnings, and a decoder's message may quote much of the input.
func short(err error) string {
	return api.Truncate(err.Error(), 200)
}
