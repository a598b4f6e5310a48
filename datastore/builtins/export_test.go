package builtins

// ValidIDs is validIDs, for the tests.
var ValidIDs = validIDs
