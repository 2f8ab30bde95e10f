// Package doccheck holds tests of the module's public API as pkg.go.dev
// shows it, over every package outside internal/ that is not a command:
// every exported identifier has a doc comment (TestExportedDocumented), and
// no exported declaration names a type of an internal package, which code
// outside the module could not write down (TestNoInternalTypesInAPI). It has
// no code of its own.
package doccheck
