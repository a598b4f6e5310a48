// Package builtins exposes the relationship store to policies: it
// registers nexus' host builtins (declared in bundle.NexusBuiltins) with
// an engine's registry, backed by a Store (what *datastore.BoltStore
// offers policies).
//
//	eng, err := builtins.NewEngine(ctx, store, engine.Config{})
//
// or, to add builtins of one's own to the same registry:
//
//	reg := engine.NewRegistry()
//	if err := builtins.Register(reg, store); err != nil { ... }
//	eng, err := engine.New(ctx, engine.Config{Builtins: reg})
//
// In Rego:
//
//	allow if nexus.check("file:f1", "read", "user:bob")
//	allow if "admin" in nexus.roles("user:alice", "acme")
//
// # Caveats
//
// An error from the store (a malformed argument, an unknown type or
// permission, a walk deeper than the depth limit) aborts the evaluation:
// the decision fails closed instead of treating the error as "no".
package builtins

import (
	"context"
	"fmt"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
	"github.com/nexuspdp/nexus/engine"
)

// Store is what the builtins read from the relationship store, one
// method per builtin: nexus.check, nexus.roles, nexus.relations (Read,
// or AppendSubjects when the store has it, as *datastore.BoltStore does),
// nexus.lookup_resources and nexus.lookup_subjects. *datastore.BoltStore
// implements it; see datastore.Store for each method's contract.
type Store interface {
	Check(ctx context.Context, req datastore.CheckRequest) (datastore.CheckResult, error)
	AppendRoles(ctx context.Context, dst []string, subject api.Subject, tenant string) ([]string, error)
	Read(ctx context.Context, f datastore.Filter) ([]api.Tuple, error)
	LookupResources(ctx context.Context, subject api.Subject, permission, resourceType string) ([]string, error)
	LookupSubjects(ctx context.Context, object api.Object, permission, subjectType string) ([]string, error)
}

var _ Store = (*datastore.BoltStore)(nil)

// subjectsAppender is the faster read nexus.relations uses when the store
// offers it (datastore.Store.AppendSubjects).
type subjectsAppender interface {
	AppendSubjects(ctx context.Context, dst []string, object api.Object, relation string) ([]string, error)
}

var _ subjectsAppender = (*datastore.BoltStore)(nil)

// NewEngine returns an engine whose policies can call the relationship
// builtins over s, besides those cfg.Builtins already holds (a new registry
// if nil).
func NewEngine(ctx context.Context, s Store, cfg engine.Config) (*engine.Engine, error) {
	if cfg.Builtins == nil {
		cfg.Builtins = engine.NewRegistry()
	}
	if err := Register(cfg.Builtins, s); err != nil {
		return nil, err
	}
	return engine.New(ctx, cfg)
}

// Register adds nexus.check, nexus.valid_ids, nexus.roles,
// nexus.relations, nexus.lookup_resources, nexus.lookup_subjects,
// nexus.envoy_decide, nexus.resource_tenant and nexus.grant to reg.
func Register(reg *engine.Registry, s Store) error {
	check := func(ctx context.Context, object, permission, subject string) (bool, error) {
		// The store validates the IDs, names and types it is asked about;
		// the arguments are only split here, so that each is checked once.
		obj, err := api.SplitObject(object)
		if err != nil {
			return false, err
		}
		sub, err := api.SplitSubject(subject)
		if err != nil {
			return false, err
		}
		res, err := s.Check(ctx, datastore.CheckRequest{Object: obj, Permission: permission, Subject: sub})
		return res.Allowed, err
	}
	roles := func(ctx context.Context, dst []string, subject, tenant string) ([]string, error) {
		sub, err := api.ParseSubject(subject)
		if err != nil {
			return dst, fmt.Errorf("nexus.roles: %w", err)
		}
		return s.AppendRoles(ctx, dst, sub, tenant)
	}
	relations := func(ctx context.Context, dst []string, object, relation string) ([]string, error) {
		obj, err := api.ParseObject(object)
		if err != nil {
			return dst, fmt.Errorf("nexus.relations: %w", err)
		}
		if sa, ok := s.(subjectsAppender); ok {
			// The same subjects as Read's tuples name, without building
			// the tuples or a read transaction per call.
			dst, err = sa.AppendSubjects(ctx, dst, obj, relation)
			if err != nil {
				return dst, fmt.Errorf("nexus.relations: %w", err)
			}
			return dst, nil
		}
		ts, err := s.Read(ctx, datastore.Filter{ObjectType: obj.Type, ObjectID: obj.ID, Relation: relation})
		if err != nil {
			return dst, fmt.Errorf("nexus.relations: %w", err)
		}
		for _, t := range ts {
			dst = append(dst, t.Subject.String())
		}
		return dst, nil
	}
	lookupResources := func(ctx context.Context, dst []string, subject, permission, typ string) ([]string, error) {
		sub, err := api.ParseSubject(subject)
		if err != nil {
			return dst, fmt.Errorf("nexus.lookup_resources: %w", err)
		}
		ids, err := s.LookupResources(ctx, sub, permission, typ)
		if err != nil {
			return dst, fmt.Errorf("nexus.lookup_resources: %w", err)
		}
		return append(dst, ids...), nil
	}
	lookupSubjects := func(ctx context.Context, dst []string, object, permission, typ string) ([]string, error) {
		obj, err := api.ParseObject(object)
		if err != nil {
			return dst, fmt.Errorf("nexus.lookup_subjects: %w", err)
		}
		ids, err := s.LookupSubjects(ctx, obj, permission, typ)
		if err != nil {
			return dst, fmt.Errorf("nexus.lookup_subjects: %w", err)
		}
		return append(dst, ids...), nil
	}
	for _, b := range []struct {
		name  string
		arity int
		fn    any
	}{
		{"nexus.check", 3, engine.Predicate3(check)},
		{"nexus.valid_ids", 3, engine.Predicate3(validIDs)},
		{"nexus.roles", 2, engine.StringList2(roles)},
		{"nexus.relations", 2, engine.StringList2(relations)},
		{"nexus.lookup_resources", 3, engine.StringList3(lookupResources)},
		{"nexus.lookup_subjects", 3, engine.StringList3(lookupSubjects)},
		{"nexus.envoy_decide", 2, engine.Values2(func(ctx context.Context, w *engine.ValueWriter, table, request engine.Value) error {
			return envoyDecideValues(ctx, s, w, table, request)
		})},
		{"nexus.resource_tenant", 2, engine.StringList2(func(ctx context.Context, dst []string, object, claimed string) ([]string, error) {
			return ResourceTenant(ctx, s, dst, object, claimed)
		})},
		{"nexus.grant", 4, engine.StringList4(func(ctx context.Context, dst []string, subject, action, object, tenant string) ([]string, error) {
			return Grant(ctx, s, dst, subject, action, object, tenant)
		})},
	} {
		if err := reg.Register(b.name, b.arity, b.fn); err != nil {
			return fmt.Errorf("builtins: %w", err)
		}
	}
	return nil
}

// validIDs reports whether each of a, b and c is empty or a valid ID.
func validIDs(_ context.Context, a, b, c string) (bool, error) {
	for _, s := range [3]string{a, b, c} {
		if s != "" && !api.ValidID(s) {
			return false, nil
		}
	}
	return true, nil
}
