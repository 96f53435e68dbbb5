# NixOS VM test: the scenario of the Debian VM tier (vm-tests/), on NixOS.
#
# One ToR running FRR (bgpd + bfdd, AS 65102, 172.18.20.1/24) and two workers running uplink
# (AS 65801, 172.18.20.2 and .3) on one L2 segment. Each worker announces the VIP
# 192.168.100.10/32 and its pod subnet 10.128.n.0/24 and serves HTTP on the VIP. worker1 is
# configured through `services.uplink.settings`; worker2 boots with a config drive (label
# UPLINK) and gets its uplink.toml and hostname from it through uplink-config.service, so both
# config paths of the module are exercised.
#
# Asserts: every session Established (on both sides); the VIP on the ToR with two ECMP next
# hops; each pod subnet via its worker; HTTP to the VIP answered by both workers; after worker2
# loses power, its next hop leaves the ToR within BFD's detection time (well under the 9 s hold
# time) and HTTP keeps being answered by worker1.
#
# Run: nix build .#checks.x86_64-linux.vm   (or: nix run .#checks.x86_64-linux.vm.driverInteractive)
{
  uplinkModule,
  # null: the module's default (nix/package.nix built with the nodes' nixpkgs).
  uplinkPackage ? null,
}:
{ lib, hostPkgs, ... }:

let
  workerSettings = import ./worker-settings.nix;
  vip = "192.168.100.10";
  # Client source addresses on the ToR: the ToR hashes ECMP on L3, so requests from several
  # sources reach both workers (each has a 1-in-2 chance; 16 sources all to one worker is 2^-15).
  clients = map (i: "172.18.20.${toString (100 + i)}") (lib.range 1 16);

  # The config drive of worker2: hostname + uplink/uplink.toml, labelled UPLINK, as
  # image/mkconfigdrive makes it for the Debian image.
  configDrive =
    hostPkgs.runCommand "uplink-config-drive-worker2.img"
      {
        nativeBuildInputs = [
          hostPkgs.dosfstools
          hostPkgs.mtools
        ];
      }
      ''
        mkdir -p tree/uplink
        echo worker2 > tree/hostname
        cp ${(hostPkgs.formats.toml { }).generate "uplink.toml" (workerSettings 2)} tree/uplink/uplink.toml
        mkfs.vfat -n UPLINK -C $out 2048
        mcopy -s -i $out tree/hostname tree/uplink ::/
      '';

  worker =
    n:
    { pkgs, ... }:
    {
      imports = [ uplinkModule ];
      virtualisation.vlans = [ 1 ];
      networking.useDHCP = false;
      networking.interfaces.eth1.ipv4.addresses = lib.mkForce [
        {
          address = "172.18.20.${toString (n + 1)}";
          prefixLength = 24;
        }
      ];
      networking.firewall.allowedTCPPorts = [ 80 ];
      services.uplink.enable = true;
      services.uplink.openFirewall = true;
      services.uplink.package = lib.mkIf (uplinkPackage != null) uplinkPackage;
      environment.systemPackages = [ pkgs.jq ];

      # The VIP is local on every worker (the ToR reaches it through BGP), and a small HTTP
      # server bound to it answers with the node's name.
      systemd.services.vip-http = {
        wantedBy = [ "multi-user.target" ];
        after = [ "network-online.target" ];
        wants = [ "network-online.target" ];
        path = [ pkgs.iproute2 ];
        script = ''
          ip addr replace ${vip}/32 dev lo
          mkdir -p /run/vip-http
          echo worker${toString n} > /run/vip-http/index.html
          exec ${pkgs.python3}/bin/python3 -m http.server --bind ${vip} --directory /run/vip-http 80
        '';
      };
    };
in
{
  name = "uplink-tor-two-workers";

  nodes = {
    tor =
      { pkgs, ... }:
      {
        virtualisation.vlans = [ 1 ];
        networking.useDHCP = false;
        networking.interfaces.eth1.ipv4.addresses = lib.mkForce (
          map (address: {
            inherit address;
            prefixLength = 24;
          }) ([ "172.18.20.1" ] ++ clients)
        );
        networking.firewall.enable = false;
        # L3 ECMP hash (the default), stated so the client spread above holds.
        boot.kernel.sysctl."net.ipv4.fib_multipath_hash_policy" = 0;
        environment.systemPackages = [
          pkgs.curl
          pkgs.jq
        ];
        services.frr = {
          bgpd.enable = true;
          bfdd.enable = true;
          config = ''
            bfd
             profile workers
              receive-interval 300
              transmit-interval 300
              detect-multiplier 3
             exit
            exit
            !
            router bgp 65102
             bgp router-id 172.18.20.1
             no bgp ebgp-requires-policy
             bgp bestpath as-path multipath-relax
             neighbor workers peer-group
             neighbor workers remote-as 65801
             neighbor workers timers 3 9
             neighbor workers bfd
             neighbor workers bfd profile workers
             neighbor 172.18.20.2 peer-group workers
             neighbor 172.18.20.3 peer-group workers
             address-family ipv4 unicast
              maximum-paths 8
             exit-address-family
            exit
          '';
        };
      };

    worker1 = {
      imports = [ (worker 1) ];
      services.uplink.settings = workerSettings 1 // {
        node.name = "worker1";
      };
    };

    worker2 = {
      imports = [ (worker 2) ];
      # No settings: uplink.toml and the hostname come from the config drive at boot.
      services.uplink.configDrive.enable = true;
      virtualisation.qemu.options = [
        "-drive"
        "file=${configDrive},format=raw,if=virtio,readonly=on"
      ];
    };
  };

  testScript = ''
    import json
    import time

    VIP = "${vip}"
    WORKERS = {"172.18.20.2": "worker1", "172.18.20.3": "worker2"}
    CLIENTS = ${builtins.toJSON clients}


    def tor_route(prefix):
        routes = json.loads(tor.succeed(f"ip -json route show {prefix}"))
        return routes[0] if routes else None


    def next_hops(prefix):
        route = tor_route(prefix)
        if route is None:
            return set()
        if "nexthops" in route:
            return {nh["gateway"] for nh in route["nexthops"]}
        return {route["gateway"]} if "gateway" in route else set()


    def answers():
        seen = set()
        for src in CLIENTS:
            seen.add(tor.succeed(f"curl --silent --fail --max-time 3 --interface {src} http://{VIP}/").strip())
        return seen


    start_all()
    tor.wait_for_unit("frr.service")
    worker1.wait_for_unit("uplink.service")
    worker2.wait_for_unit("uplink-config.service")
    worker2.wait_for_unit("uplink.service")
    for w in (worker1, worker2):
        w.wait_for_unit("vip-http.service")
        w.wait_for_open_port(80, VIP)

    with subtest("worker2 took its config and name from the config drive"):
        worker2.succeed("journalctl -b -u uplink-config.service | grep 'uplink-config: applied from config drive'")
        worker2.succeed("test -f /etc/uplink/uplink.toml")
        worker2.succeed("grep -x 'name = \"worker2\"' /etc/uplink/conf.d/00-uplink-config-node.toml")
        worker2.succeed("uplink check --config /etc/uplink/uplink.toml")

    with subtest("every session is Established"):
        for peer in WORKERS:
            tor.wait_until_succeeds(
                f"vtysh -c 'show bgp neighbors {peer} json' | jq -e '.\"{peer}\".bgpState == \"Established\"'",
                timeout=120,
            )
        for w in (worker1, worker2):
            w.wait_until_succeeds(
                "uplink show bgp summary --json | jq -e '.ipv4Unicast.peers.\"172.18.20.1\".state == \"Established\"'",
                timeout=60,
            )
        tor.wait_until_succeeds("vtysh -c 'show bfd peers json' | jq -e '[.[] | select(.status == \"up\")] | length == 2'", timeout=60)

    with subtest("the VIP is on the ToR with two next hops"):
        tor.wait_until_succeeds(f"ip -json route show {VIP} | jq -e '.[0].nexthops | length == 2'", timeout=60)
        assert next_hops(VIP) == set(WORKERS), f"VIP next hops: {next_hops(VIP)}"

    with subtest("each pod subnet is on the ToR via its worker"):
        for gateway, n in (("172.18.20.2", 1), ("172.18.20.3", 2)):
            tor.wait_until_succeeds(f"ip route show 10.128.{n}.0/24 | grep -q 'via {gateway}'", timeout=60)

    with subtest("HTTP to the VIP is answered by both workers"):
        seen = answers()
        assert seen == {"worker1", "worker2"}, f"answers: {seen}"

    with subtest("powering off worker2 removes its next hop and worker1 keeps answering"):
        worker2.crash()
        start = time.monotonic()
        tor.wait_until_succeeds(f"test \"$(ip -json route show {VIP} | jq -c '[.[0].gateway // empty, (.[0].nexthops // [])[].gateway]')\" = '[\"172.18.20.2\"]'", timeout=30)
        elapsed = time.monotonic() - start
        print(f"VIP failover: worker2's next hop left the ToR {elapsed:.1f} s after power-off")
        # BFD at 300 ms x 3 detects in about a second; the 9 s hold time must not be what did it.
        assert elapsed < 8, f"failover took {elapsed:.1f} s: BFD did not bring the session down"
        tor.wait_until_fails("ip route show 10.128.2.0/24 | grep -q via", timeout=10)
        seen = answers()
        assert seen == {"worker1"}, f"answers after failover: {seen}"
  '';
}
