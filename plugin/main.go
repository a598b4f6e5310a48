package main

// main is never called in a c-shared (reactor) build; the host calls
// _initialize, which runs the init functions, and then the exported callbacks.
func main() {}
