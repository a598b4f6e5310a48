// Package config reads an OPA configuration file, as opa run and
// opa-envoy-plugin read it, for nexus: Parse (and Load, with opa run's
// --set and --set-file) reads the whole file, substituting ${VAR} from
// the environment as OPA does; the envoy_ext_authz_grpc plugin's settings
// are read with the plugin's defaults; the services are read by
// ParseServices, on OPA's own REST client package (plugins/rest), so that
// every credential kind OPA has (bearer, client_tls, oauth2, s3_signing,
// gcp_metadata, azure_managed_identity) works as in OPA; the bundles, keys, decision_logs and status sections are
// kept as written for the packages that read them. A setting nexus does
// not support is an error that names it (errors.Is ErrUnsupported), never
// a setting silently ignored; an unknown setting is an error too.
//
// Sections arrive as JSON (an OPA configuration in YAML is converted to
// JSON first, as OPA does).
//
// # Caveats
//
// A plugin path without a slash that holds dots ("envoy.authz.allow") is
// read as a Rego reference; opa-envoy-plugin would look up one key with
// dots in its name. An unset ${VAR} is left as written, as OPA leaves it;
// Config.MissingEnv lists them so that the caller can warn.
package config
