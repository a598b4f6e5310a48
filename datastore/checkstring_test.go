package datastore_test

import (
	"context"

	"github.com/nexuspdp/nexus/api"
	"github.com/nexuspdp/nexus/datastore"
)

// checkString checks with text arguments ("type:id", permission,
// "type:id[#relation]").
func checkString(ctx context.Context, s *datastore.BoltStore, object, permission, subject string) (bool, error) {
	obj, err := api.ParseObject(object)
	if err != nil {
		return false, err
	}
	sub, err := api.ParseSubject(subject)
	if err != nil {
		return false, err
	}
	res, err := s.Check(ctx, datastore.CheckRequest{Object: obj, Permission: permission, Subject: sub})
	return res.Allowed, err
}
