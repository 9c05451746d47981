#!/usr/bin/env bash
# Two hosts, for real: node 0 and node 1 live in two network namespaces joined only by a veth
# pair, so UCX can reach the other node only over TCP across that link. Runs a storm and a
# ping-pong across them, checks the traffic crossed the veth, and removes the namespaces.
#
# usage: netns_test.sh LOOMRUN COMM_CHECK
set -u
loomrun=$1 check=$2
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: creating network namespaces needs root"; exit 77; fi
command -v ip >/dev/null || { echo "SKIP: iproute2 (ip) is not installed"; exit 77; }
ns0=loomtest$$a ns1=loomtest$$b
cleanup() { ip netns del "$ns0" 2>/dev/null; ip netns del "$ns1" 2>/dev/null; rm -f "$wrap"; }
wrap=$(mktemp)
trap cleanup EXIT
if ! ip netns add "$ns0" 2>/dev/null; then echo "SKIP: cannot create network namespaces here"; exit 77; fi
ip netns add "$ns1" || exit 1
# Addresses exist only inside these two namespaces.
ip link add lmv$$a type veth peer name lmv$$b || exit 1
ip link set lmv$$a netns "$ns0" && ip link set lmv$$b netns "$ns1" || exit 1
ip -n "$ns0" link set lmv$$a name loomveth && ip -n "$ns1" link set lmv$$b name loomveth || exit 1
ip -n "$ns0" addr add 10.203.77.1/24 dev loomveth && ip -n "$ns1" addr add 10.203.77.2/24 dev loomveth || exit 1
ip -n "$ns0" link set loomveth up && ip -n "$ns1" link set loomveth up || exit 1
ip -n "$ns0" link set lo up && ip -n "$ns1" link set lo up

# Each node enters its namespace by rank.
cat >"$wrap" <<WRAP
#!/usr/bin/env bash
case "\$LOOM_RANK" in
  0) exec ip netns exec $ns0 "\$@" ;;
  *) exec ip netns exec $ns1 "\$@" ;;
esac
WRAP
chmod +x "$wrap"

tx_before=$(ip -n "$ns0" -s -j link show loomveth | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])')
"$loomrun" -n 2 --timeout 120 --transports tcp --net-devices loomveth "$wrap" "$check" storm 20000 || { echo "FAILED: storm across namespaces"; exit 1; }
"$loomrun" -n 2 --timeout 60 --transports tcp --net-devices loomveth "$wrap" "$check" pingpong 2000 || { echo "FAILED: pingpong across namespaces"; exit 1; }
tx_after=$(ip -n "$ns0" -s -j link show loomveth | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["stats64"]["tx"]["bytes"])')
sent=$((tx_after - tx_before))
echo "node 0's namespace sent $sent bytes over the veth"
# The storm alone moves ~250 MB each way; far more than 10 MB must have crossed the link.
if (( sent < 10000000 )); then echo "FAILED: the traffic did not cross the veth"; exit 1; fi
echo "ok: job across two network namespaces over TCP"
