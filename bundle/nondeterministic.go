package bundle

// MetadataNondeterministic is the manifest metadata key under which the
// compiler records, for each entrypoint, the non-deterministic builtins
// its policy can reach (see [Manifest.Nondeterministic]): an object from
// entrypoint to a list of builtin names, empty for an entrypoint that
// reaches none.
const MetadataNondeterministic = "nexus_nondeterministic"

// Nondeterministic returns the builtins whose result may differ between
// two evaluations on the same input, data and policy (a clock, randomness,
// the network: time.now_ns, rand.intn, http.send, ... and host builtins
// declared [HostBuiltin.Nondeterministic]) that the rules of entrypoint can
// reach, as recorded at compile time, and whether that is known.
//
// A decision of such an entrypoint is not a function of its input: the
// same request may deserve a different answer, so a decision cache must
// not reuse it. Known with no builtins means the entrypoint's decisions
// depend only on its input, data and policy. Unknown (false) is a bundle
// built elsewhere (OPA's opa build records nothing of the kind), by an
// older nexus, or an entrypoint the record does not name; a cache must
// treat it as non-deterministic.
func (m *Manifest) Nondeterministic(entrypoint string) ([]string, bool) {
	all, ok := m.Metadata[MetadataNondeterministic].(map[string]any)
	if !ok {
		return nil, false
	}
	raw, ok := all[entrypoint].([]any)
	if !ok {
		return nil, false
	}
	names := make([]string, 0, len(raw))
	for _, r := range raw {
		s, ok := r.(string)
		if !ok || s == "" {
			return nil, false
		}
		names = append(names, s)
	}
	return names, true
}
