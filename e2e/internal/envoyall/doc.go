//go:generate ./gen.sh

package envoyall
