# docs/examples/uplink.toml as `services.uplink.settings` (worker wk3 of the seed lab: AS 65801
# peering with ToR r2, AS 65102). scripts/nix-check asserts that this evaluates to exactly what
# the TOML file holds, so the Nix spelling of the config stays true to the daemon's schema.
# Use: services.uplink.settings = import ./nix/examples/uplink.nix;
{
  # Never accept these from any peer, whatever a neighbor's to_receive says.
  always_block = [
    "169.254.0.0/16"
    "127.0.0.0/8"
  ];

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
      # id = "172.18.20.113";  # BGP Identifier; picked from the node's addresses when left out
      vrf = ""; # "" is the default VRF
      # What this node originates: its pod subnet and a LoadBalancer VIP.
      prefixes = [
        "10.128.7.0/24"
        "172.18.20.201/32"
      ];
      maximum_paths = 64;
      multipath_relax = true;
      neighbors = [
        {
          address = "172.18.20.1";
          asn = 65102;
          hold_time = "90s";
          keepalive_time = "30s";
          connect_time = "5s";
          bfd_profile = "tor";
          # RFC 4724: the ToR keeps this node's routes while uplink restarts, and the other way.
          graceful_restart = true;
          # Send only the listed router prefixes to this neighbor.
          to_advertise.allowed = {
            mode = "filtered";
            prefixes = [
              "10.128.7.0/24"
              "172.18.20.201/32"
            ];
          };
          # RFC 8092: 4-byte AS numbers need large communities.
          to_advertise.with_community = [
            {
              community = "large:65801:0:100";
              prefixes = [ "172.18.20.201/32" ];
            }
          ];
          # Accept only a default route from the ToR.
          to_receive.allowed = {
            mode = "filtered";
            prefixes = [ { prefix = "0.0.0.0/0"; } ];
          };
        }
      ];
    }
  ];
}
