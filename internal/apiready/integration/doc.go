// Package integration proves apiready.Wait against a real API server behind
// a fault proxy: frozen, refusing connections, and gone for good.
package integration
