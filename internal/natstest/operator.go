package natstest

import (
	"fmt"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Operator is NATS decentralized authentication as nsc sets it up: an
// operator, a system account and an application account with JetStream,
// whose users connect with credentials files (a user JWT the account
// signed, and the user's nkey seed). Configure puts it into a server's
// options (Options.Configure).
type Operator struct {
	op       *jwt.OperatorClaims
	resolver *server.MemAccResolver
	sysPub   string
	acc      nkeys.KeyPair
	accPub   string
}

// NewOperator makes an operator with a system account and one account
// with JetStream (no limits).
func NewOperator() (*Operator, error) {
	opKP, err := nkeys.CreateOperator()
	if err != nil {
		return nil, err
	}
	opPub, _ := opKP.PublicKey()
	o := &Operator{op: jwt.NewOperatorClaims(opPub), resolver: &server.MemAccResolver{}}
	o.op.Name = "natstest"
	account := func(name string, js bool) (nkeys.KeyPair, string, error) {
		kp, err := nkeys.CreateAccount()
		if err != nil {
			return nil, "", err
		}
		pub, _ := kp.PublicKey()
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		tok, err := ac.Encode(opKP)
		if err != nil {
			return nil, "", fmt.Errorf("natstest: account %s: %w", name, err)
		}
		return kp, pub, o.resolver.Store(pub, tok)
	}
	if _, o.sysPub, err = account("SYS", false); err != nil {
		return nil, err
	}
	o.op.SystemAccount = o.sysPub
	if o.acc, o.accPub, err = account("APP", true); err != nil {
		return nil, err
	}
	// The claims are trusted as given (the server needs them decoded and
	// signed by the operator's own key).
	tok, err := o.op.Encode(opKP)
	if err != nil {
		return nil, err
	}
	if o.op, err = jwt.DecodeOperatorClaims(tok); err != nil {
		return nil, err
	}
	return o, nil
}

// Configure makes a server trust the operator and resolve its accounts.
func (o *Operator) Configure(opts *server.Options) {
	opts.TrustedOperators = []*jwt.OperatorClaims{o.op}
	opts.AccountResolver = o.resolver
	opts.SystemAccount = o.sysPub
}

// UserCreds returns the content of a credentials file for a new user of
// the application account.
func (o *Operator) UserCreds(name string) ([]byte, error) {
	return userCreds(o.acc, name)
}

// ForeignCreds returns a well-formed credentials file whose account the
// operator does not know: the server must refuse it.
func ForeignCreds(name string) ([]byte, error) {
	acc, err := nkeys.CreateAccount()
	if err != nil {
		return nil, err
	}
	return userCreds(acc, name)
}

func userCreds(acc nkeys.KeyPair, name string) ([]byte, error) {
	ukp, err := nkeys.CreateUser()
	if err != nil {
		return nil, err
	}
	upub, _ := ukp.PublicKey()
	uc := jwt.NewUserClaims(upub)
	uc.Name = name
	tok, err := uc.Encode(acc)
	if err != nil {
		return nil, fmt.Errorf("natstest: user %s: %w", name, err)
	}
	seed, err := ukp.Seed()
	if err != nil {
		return nil, err
	}
	return jwt.FormatUserConfig(tok, seed)
}
