package confcheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	structuralschema "k8s.io/apiextensions-apiserver/pkg/apiserver/schema"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/schema/pruning"
	"k8s.io/apiextensions-apiserver/pkg/apiserver/validation"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/validation/field"
	celconfig "k8s.io/apiserver/pkg/apis/cel"
	"sigs.k8s.io/yaml"
)

// crdVersion is one served version of a CustomResourceDefinition, ready to
// validate objects the way kube-apiserver does.
type crdVersion struct {
	structural *structuralschema.Structural
	validator  validation.SchemaValidator
	cel        *cel.Validator
}

// CRDs validates custom resources against CustomResourceDefinitions, as
// kube-apiserver does on create with strict field validation: OpenAPI v3
// schema, x-kubernetes-validations (CEL) rules, and no unknown fields.
type CRDs struct {
	byGVK map[schema.GroupVersionKind]*crdVersion
}

// LoadCRDs reads a multi-document YAML stream of CustomResourceDefinitions
// (such as istio.io/api's kubernetes/customresourcedefinitions.gen.yaml).
func LoadCRDs(data []byte) (*CRDs, error) {
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	c := &CRDs{byGVK: map[schema.GroupVersionKind]*crdVersion{}}
	for _, doc := range docs {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(doc, &crd); err != nil {
			return nil, fmt.Errorf("crd: %w", err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			continue
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served || v.Schema == nil || v.Schema.OpenAPIV3Schema == nil {
				continue
			}
			var internal apiextensions.JSONSchemaProps
			if err := apiextensionsv1.Convert_v1_JSONSchemaProps_To_apiextensions_JSONSchemaProps(v.Schema.OpenAPIV3Schema, &internal, nil); err != nil {
				return nil, fmt.Errorf("crd %s %s: %w", crd.Name, v.Name, err)
			}
			s, err := structuralschema.NewStructural(&internal)
			if err != nil {
				return nil, fmt.Errorf("crd %s %s: structural schema: %w", crd.Name, v.Name, err)
			}
			sv, _, err := validation.NewSchemaValidator(&internal)
			if err != nil {
				return nil, fmt.Errorf("crd %s %s: schema validator: %w", crd.Name, v.Name, err)
			}
			gvk := schema.GroupVersionKind{Group: crd.Spec.Group, Version: v.Name, Kind: crd.Spec.Names.Kind}
			c.byGVK[gvk] = &crdVersion{
				structural: s,
				validator:  sv,
				cel:        cel.NewValidator(s, true, celconfig.PerCallLimit),
			}
		}
	}
	if len(c.byGVK) == 0 {
		return nil, fmt.Errorf("%w: no CustomResourceDefinition with a schema", ErrInvalid)
	}
	return c, nil
}

// Has reports whether a CRD for gvk was loaded.
func (c *CRDs) Has(gvk schema.GroupVersionKind) bool { return c.byGVK[gvk] != nil }

// Validate validates one object (decoded from JSON) of kind gvk.
func (c *CRDs) Validate(ctx context.Context, gvk schema.GroupVersionKind, obj map[string]any) error {
	v := c.byGVK[gvk]
	if v == nil {
		return fmt.Errorf("%w: no CRD for %s", ErrReference, gvk)
	}
	var errs []error
	// Unknown fields: what kube-apiserver prunes, strict field validation
	// rejects. Prune a copy so obj stays as written.
	cp, err := deepCopyJSON(obj)
	if err != nil {
		return err
	}
	unknown := pruning.PruneWithOptions(cp, v.structural, true, structuralschema.UnknownFieldPathOptions{TrackUnknownFieldPaths: true})
	for _, p := range unknown {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrUnknownField, gvk.Kind, p))
	}
	for _, e := range validation.ValidateCustomResource(nil, obj, v.validator) {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, gvk.Kind, e.Error()))
	}
	celErrs, _ := v.cel.Validate(ctx, field.NewPath(""), v.structural, obj, nil, celconfig.RuntimeCELCostBudget)
	for _, e := range celErrs {
		errs = append(errs, fmt.Errorf("%w: %s: %s", ErrInvalid, gvk.Kind, e.Error()))
	}
	return errors.Join(errs...)
}

func deepCopyJSON(obj map[string]any) (map[string]any, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, utiljson.Unmarshal(b, &out)
}

// splitYAML splits a multi-document YAML stream, dropping empty documents.
func splitYAML(data []byte) ([][]byte, error) {
	var out [][]byte
	var cur bytes.Buffer
	flush := func() {
		if strings.TrimSpace(stripComments(cur.String())) != "" {
			out = append(out, bytes.Clone(cur.Bytes()))
		}
		cur.Reset()
	}
	r := bytes.NewBuffer(data)
	for {
		line, err := r.ReadString('\n')
		if strings.TrimRight(line, " \t\r\n") == "---" {
			flush()
		} else {
			cur.WriteString(line)
		}
		if err == io.EOF {
			break
		}
	}
	flush()
	return out, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for _, l := range strings.Split(s, "\n") {
		if t := strings.TrimSpace(l); t != "" && !strings.HasPrefix(t, "#") {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.String()
}
