package lbc

import (
	"context"
	"fmt"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
)

// TargetGroupBindings are elbv2.k8s.aws/v1beta1, as the real controller
// serves them; this schema carries only the fields the lab and the gate read.
var GVR = schema.GroupVersionResource{Group: "elbv2.k8s.aws", Version: "v1beta1", Resource: "targetgroupbindings"}

// ReadinessGatePrefix + binding name is the pod condition the controller sets
// when the pod's target is healthy.
const ReadinessGatePrefix = "target-health.elbv2.k8s.aws/"

// CRD is our minimal TargetGroupBinding definition.
func CRD() *apiextensionsv1.CustomResourceDefinition {
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "targetgroupbindings.elbv2.k8s.aws"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: GVR.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "targetgroupbindings", Singular: "targetgroupbinding", Kind: "TargetGroupBinding", ListKind: "TargetGroupBindingList",
				ShortNames: []string{"tgb"},
			},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: GVR.Version, Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {
							Type:     "object",
							Required: []string{"targetGroupARN", "serviceRef"},
							Properties: map[string]apiextensionsv1.JSONSchemaProps{
								"targetGroupARN": str,
								"targetType":     {Type: "string", Enum: []apiextensionsv1.JSON{{Raw: []byte(`"ip"`)}, {Raw: []byte(`"instance"`)}}},
								"ipAddressType":  str,
								"serviceRef": {
									Type:     "object",
									Required: []string{"name", "port"},
									Properties: map[string]apiextensionsv1.JSONSchemaProps{
										"name": str,
										"port": {XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}},
									},
								},
							},
						},
						"status": {Type: "object", XPreserveUnknownFields: ptrTrue()},
					},
				}},
			}},
		},
	}
}

func ptrTrue() *bool { b := true; return &b }

// InstallCRD creates the CRD if absent and waits until it is served.
func InstallCRD(ctx context.Context, cfg *rest.Config) error {
	cl, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds := cl.ApiextensionsV1().CustomResourceDefinitions()
	if _, err := crds.Create(ctx, CRD(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create TargetGroupBinding CRD: %w", err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		crd, err := crds.Get(ctx, CRD().Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// Binding is the part of a TargetGroupBinding the controller acts on.
type Binding struct {
	Namespace, Name string
	TargetGroupARN  string
	TargetType      string // "ip" or "instance"
	ServiceName     string
	ServicePort     intstr.IntOrString
}

// Object renders b as an unstructured TargetGroupBinding.
func (b Binding) Object() *unstructured.Unstructured {
	port := any(b.ServicePort.IntValue())
	if b.ServicePort.Type == intstr.String {
		port = b.ServicePort.StrVal
	}
	tt := b.TargetType
	if tt == "" {
		tt = "ip"
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": GVR.GroupVersion().String(),
		"kind":       "TargetGroupBinding",
		"metadata":   map[string]any{"name": b.Name, "namespace": b.Namespace},
		"spec": map[string]any{
			"targetGroupARN": b.TargetGroupARN,
			"targetType":     tt,
			"serviceRef":     map[string]any{"name": b.ServiceName, "port": port},
		},
	}}
}

// BindingFrom reads a TargetGroupBinding.
func BindingFrom(u *unstructured.Unstructured) (Binding, error) {
	b := Binding{Namespace: u.GetNamespace(), Name: u.GetName()}
	b.TargetGroupARN, _, _ = unstructured.NestedString(u.Object, "spec", "targetGroupARN")
	b.TargetType, _, _ = unstructured.NestedString(u.Object, "spec", "targetType")
	b.ServiceName, _, _ = unstructured.NestedString(u.Object, "spec", "serviceRef", "name")
	port, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "serviceRef", "port")
	if b.TargetGroupARN == "" || b.ServiceName == "" || !ok {
		return b, fmt.Errorf("targetgroupbinding %s/%s: spec.targetGroupARN and spec.serviceRef are required", b.Namespace, b.Name)
	}
	switch p := port.(type) {
	case string:
		b.ServicePort = intstr.FromString(p)
	case int64:
		b.ServicePort = intstr.FromInt32(int32(p))
	case float64:
		b.ServicePort = intstr.FromInt32(int32(p))
	default:
		return b, fmt.Errorf("targetgroupbinding %s/%s: serviceRef.port %v is neither a number nor a name", b.Namespace, b.Name, port)
	}
	if b.TargetType == "" {
		b.TargetType = "ip"
	}
	return b, nil
}
