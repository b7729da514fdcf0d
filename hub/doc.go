// Command hub is the Imperator hub: it accepts spoke agents' Report streams
// over mutually authenticated gRPC, keeps every cluster's Machines and usage
// in memory and in the hub cluster's Kubernetes API (OCM ManagedCluster plus a
// ClusterInventory per cluster), and tracks cluster liveness.
//
//	hub serve [flags]                             run the hub (bare `hub [flags]` does the same)
//	hub token create|list|revoke                  the same command as imperatorctl token,
//	                                              run with the hub cluster's kubeconfig
//	hub ca print                                  print the hub CA bundle (PEM) for spokes' --hub-ca-file
//	hub ca init                                   create the hub CA (the hub also does at its first start)
//	hub ca rotate [--promote|--finish [--force]]  rotate the hub CA: stage a next CA, promote it, drop the old
//	hub client-cert --name N --role viewer|holder|admin --hub-address H
//	                                              print an imperatorctl configuration with a new client certificate
//	hub client-cert revoke SERIAL                 revoke a client certificate on every hub replica
//	hub version                                   print the build
//
// Exit codes: 0 success, 1 the command failed, 2 a bad command line.
package main
