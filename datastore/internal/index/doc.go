// Package index is the format of the relationship store's two indexes,
// shared by the store's writes and its checks: the keys of the
// object-first (obj) and subject-first (subj) buckets, the name
// dictionary their numbers come from, the checksum each key holds as its
// value, and the cursor that reads keys only after checking them.
package index
