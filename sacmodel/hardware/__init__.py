"""The machine and the model being served: quantities with units, the model catalog, the hardware topology
(a networkx graph with routes and max-min sharing), the scenario file's schema, loading and caching of
scenarios, named parameters, and the cluster description (hosts, instances, KV tiers, network)."""
