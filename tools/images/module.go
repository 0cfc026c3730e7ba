package images

// ModuleRoot is the root of the checkout this package was built from (the
// folder of its go.mod), or "" when the program was not built from one.
func ModuleRoot() string { return moduleRoot() }
