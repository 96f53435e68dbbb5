# uplink settings of worker n in the VM test (nix/tests/vm.nix), as plain Nix attributes.
# Pure (no nixpkgs), so scripts/nix-check can render it to TOML and run `uplink check` on it
# where Nix packages cannot be fetched: the field names here are checked against the real
# parser. Worker n has address 172.18.20.(n+1) and pod subnet 10.128.n.0/24; every worker
# announces the same VIP.
n:
let
  vip = "192.168.100.10/32";
  pod = "10.128.${toString n}.0/24";
in
{
  bgp.bfd_profiles = [
    {
      name = "tor";
      receive_interval = "300ms";
      transmit_interval = "300ms";
      detect_multiplier = 3;
    }
  ];
  bgp.routers = [
    {
      asn = 65801;
      id = "172.18.20.${toString (n + 1)}";
      vrf = "";
      prefixes = [
        vip
        pod
      ];
      maximum_paths = 8;
      neighbors = [
        {
          address = "172.18.20.1";
          asn = 65102;
          hold_time = "9s";
          keepalive_time = "3s";
          connect_time = "2s";
          bfd_profile = "tor";
          to_advertise.allowed = {
            mode = "filtered";
            prefixes = [
              vip
              pod
            ];
          };
          to_receive.allowed = {
            mode = "filtered";
            prefixes = [
              {
                prefix = "0.0.0.0/0";
                le = 32;
              }
            ];
          };
        }
      ];
    }
  ];
}
