# scripts/hosts-figures.awk - what bench/allreduce-hosts.sh printed, as
# issue 16's figures against their targets, a line each (for the summary
# of scripts/device-check's hosts stage):
#   awk -f scripts/hosts-figures.awk allreduce-hosts-output.txt
# The latency lines (0.0625 MiB, "0.1MiB") are left out: they have no target.

# the value of KEY=VALUE among the line's fields ("" if none)
function val(key,    i) {
	for (i = 1; i <= NF; i++)
		if (index($i, key "=") == 1)
			return substr($i, length(key) + 2)
	return ""
}

/^link=/ && !/ 2x2 / && val("size") != "0.1MiB" {
	printf "allreduce of %s, %s hosts at %s, %s %s: bus bandwidth %s Gbit/s, %.0f%% of the link%s\n",
		val("size"), val("hosts"), val("link"), val("wire"), val("algo"), val("busbw_gbit"),
		100 * val("link_fraction"), val("algo") == "ring" && val("wire") == "fp32" ? " (target 85%)" : ""
}
/^link=1gbit 2x2 / {
	sec[val("algo")] = val("sec")
}
/^rep=.* dp-train mlp1024 hosts=2 / {
	w = val("wire")
	sps[w] += val("samples_per_sec")
	n[w]++
}
/^rep=.* ddp-gloo mlp1024 / {
	ddp += val("samples_per_sec")
	nddp++
}
/^rep=.* dp-train mlp1024 hosts=2x2 / {
	a = val("allreduce")
	hx[a] += val("samples_per_sec")
	nhx[a]++
}
END {
	if (sec["ring"] > 0 && sec["hierarchical"] > 0)
		printf "allreduce, 2 x 2 ranks at 1 Gbit/s: hierarchical %.2fx the flat ring's speed (%s s against %s s a call)\n",
			sec["ring"] / sec["hierarchical"], sec["hierarchical"], sec["ring"]
	for (w in sps)
		if (nddp > 0 && ddp > 0)
			printf "MLP 784-1024-1024-10, 2 hosts at 1 Gbit/s: dp-train (%s on the wire) %.0f samples/s, PyTorch DDP (gloo) %.0f: %.2fx (target: ahead in fp32, 1.5x compressed)\n",
				w, sps[w] / n[w], ddp / nddp, (sps[w] / n[w]) / (ddp / nddp)
	if (nhx["ring"] > 0 && nhx["hierarchical"] > 0)
		printf "MLP, 2 x 2 ranks at 1 Gbit/s: hierarchical %.2fx the flat ring's samples/s (%.0f against %.0f; target 1.3x)\n",
			(hx["hierarchical"] / nhx["hierarchical"]) / (hx["ring"] / nhx["ring"]),
			hx["hierarchical"] / nhx["hierarchical"], hx["ring"] / nhx["ring"]
}
