# NixOS module: services.uplink.
#
# The daemon reads /etc/uplink/uplink.toml plus /etc/uplink/conf.d/*.toml and *.yaml (frr-k8s,
# MetalLB, OVN-Kubernetes and nmstate manifests); fragments only extend each other. `settings`
# renders the main file, `fragments` and `extraConfigFiles` fill conf.d/, and `configDrive`
# adds the boot-time hook that copies a config drive (label UPLINK) or an `uplink.config=URL`
# tarball into /etc — the same layout the Debian image reads (nix/README.md).
{
  config,
  lib,
  pkgs,
  ...
}:

let
  inherit (lib)
    mkEnableOption
    mkOption
    mkIf
    mkMerge
    types
    literalExpression
    ;

  cfg = config.services.uplink;
  toml = pkgs.formats.toml { };

  mainFile = toml.generate "uplink.toml" cfg.settings;
  fragmentFiles = lib.mapAttrs' (
    name: value: lib.nameValuePair "${name}.toml" (toml.generate "${name}.toml" value)
  ) cfg.fragments;
  confD = fragmentFiles // cfg.extraConfigFiles;
  hasMain = cfg.settings != { };

  # The config tree as it will appear in /etc/uplink, validated by the daemon's own parser at
  # build time (`uplink check`: every error with file:line:column), so a typo in a field name
  # fails `nixos-rebuild` instead of the boot.
  configTree =
    pkgs.runCommand "uplink-config"
      {
        nativeBuildInputs = lib.optional cfg.checkConfig cfg.package;
        preferLocalBuild = true;
      }
      ''
        mkdir -p $out/conf.d
        ${lib.optionalString hasMain "cp ${mainFile} $out/uplink.toml"}
        ${lib.concatStrings (
          lib.mapAttrsToList (name: file: ''
            cp ${file} $out/conf.d/${lib.escapeShellArg name}
          '') confD
        )}
        ${lib.optionalString (cfg.checkConfig && hasMain) "uplink check --config $out/uplink.toml"}
      '';

  etcFiles =
    lib.optionalAttrs hasMain { "uplink/uplink.toml".source = "${configTree}/uplink.toml"; }
    // lib.mapAttrs' (
      name: _: lib.nameValuePair "uplink/conf.d/${name}" { source = "${configTree}/conf.d/${name}"; }
    ) confD
    # `ip route show proto uplink`: names uplink's route protocol number for iproute2.
    // {
      "iproute2/rt_protos.d/uplink.conf".source = ../image/overlay/node/etc/iproute2/rt_protos.d/uplink.conf;
    };

  configHook = pkgs.writeShellApplication {
    name = "uplink-config";
    runtimeInputs = with pkgs; [
      coreutils
      findutils
      gawk
      gnutar
      gzip
      util-linux
      curl
      dhcpcd
      iproute2
      procps
      gnugrep
    ];
    # writeShellApplication writes its own shebang and `set -o errexit -o nounset -o pipefail`;
    # a second shebang further down would fail its shellcheck (SC1128).
    text = lib.removePrefix "#!/usr/bin/env bash\n" (builtins.readFile ./uplink-config.sh);
  };

  # What a routing daemon needs and nothing more: routes and nexthops over netlink
  # (CAP_NET_ADMIN), sockets bound to a VRF or interface with SO_BINDTODEVICE (CAP_NET_RAW),
  # BGP on port 179 (CAP_NET_BIND_SERVICE), SCHED_FIFO for the BFD thread (CAP_SYS_NICE).
  capabilities = [
    "CAP_NET_ADMIN"
    "CAP_NET_RAW"
    "CAP_NET_BIND_SERVICE"
    "CAP_SYS_NICE"
  ];
in
{
  options.services.uplink = {
    enable = mkEnableOption "uplink, the BGP/BFD daemon that connects this node to its fabric";

    package = mkOption {
      type = types.package;
      default = pkgs.callPackage ./package.nix { };
      defaultText = literalExpression "pkgs.callPackage ./package.nix { }";
      description = "The uplink package (static by default).";
    };

    settings = mkOption {
      type = toml.type;
      default = { };
      description = ''
        The contents of /etc/uplink/uplink.toml as Nix attributes. Field names are those of
        docs/examples/uplink.toml (the snake_case of frr-k8s FRRConfiguration). When empty, no
        uplink.toml is written: it may come from the config drive (`configDrive.enable`), and
        the service does not start until it exists.
      '';
      example = literalExpression ''
        {
          bgp.bfd_profiles = [ { name = "tor"; receive_interval = "300ms"; transmit_interval = "300ms"; detect_multiplier = 3; } ];
          bgp.routers = [ {
            asn = 65801;
            prefixes = [ "10.128.7.0/24" "192.168.100.10/32" ];
            neighbors = [ {
              address = "172.18.20.1";
              asn = 65102;
              bfd_profile = "tor";
              to_advertise.allowed.mode = "all";
              to_receive.allowed = { mode = "filtered"; prefixes = [ { prefix = "0.0.0.0/0"; } ]; };
            } ];
          } ];
        }
      '';
    };

    fragments = mkOption {
      type = types.attrsOf toml.type;
      default = { };
      description = ''
        conf.d fragments as Nix attributes: `fragments.<name>` becomes
        /etc/uplink/conf.d/<name>.toml. Fragments are read in file-name order and can only
        add to the main file; a conflict makes uplink reject the whole config.
      '';
      example = literalExpression ''{ "50-pools".pools = [ { name = "vips"; addresses = [ "192.168.100.0/24" ]; } ]; }'';
    };

    extraConfigFiles = mkOption {
      type = types.attrsOf types.path;
      default = { };
      description = ''
        Files copied into /etc/uplink/conf.d/ under the attribute name, e.g. Kubernetes
        manifests (`"60-metallb.yaml" = ./metallb.yaml;`). Names must end in .toml, .yaml
        or .yml; other files are ignored by uplink, so the module rejects them.
      '';
    };

    checkConfig = mkOption {
      type = types.bool;
      default = true;
      description = ''
        Run `uplink check` on the rendered config at build time. Turn off when the config
        names files that exist only on the node (e.g. `password_file`).
      '';
    };

    openFirewall = mkOption {
      type = types.bool;
      default = false;
      description = "Open TCP 179 (BGP) and UDP 3784, 3785, 4784 (BFD) in the NixOS firewall.";
    };

    watchdogSec = mkOption {
      type = types.nullOr types.str;
      default = "30s";
      description = "systemd WatchdogSec for uplink (it pets the watchdog at half this); null to turn off.";
    };

    waitReady = {
      enable = mkEnableOption ''
        uplink-wait-ready.service (like systemd-networkd-wait-online): it ends when every
        configured BGP session is Established with End-of-RIB sent and received, so units such
        as kubelet can order themselves after it. Enabled, it holds multi-user.target until
        then'';
      timeout = mkOption {
        type = types.str;
        default = "120s";
        description = "How long uplink-wait-ready.service waits before it fails, naming the sessions that are not ready.";
      };
    };

    inhibitDelayMaxSec = mkOption {
      type = types.int;
      default = 45;
      description = ''
        logind's InhibitDelayMaxSec: how long a shutdown or reboot waits for uplink's drain
        (GRACEFUL_SHUTDOWN, then the withdrawal after drain_time). Keep it above drain_time.
      '';
    };

    configDrive = {
      enable = mkEnableOption ''
        the boot-time hook (uplink-config.service, before uplink, NetworkManager, sshd and FRR)
        that applies a config drive labelled `configDrive.label` or, failing that, the .tar.gz
        named by `uplink.config=URL` on the kernel command line'';
      label = mkOption {
        type = types.str;
        default = "UPLINK";
        description = "Filesystem label of the config drive (vfat or iso9660).";
      };
    };
  };

  config = mkIf cfg.enable (mkMerge [
    {
      assertions = [
        {
          assertion = lib.all (name: builtins.match ".*\\.(toml|ya?ml)" name != null) (
            builtins.attrNames cfg.extraConfigFiles
          );
          message = "services.uplink.extraConfigFiles: names must end in .toml, .yaml or .yml (uplink ignores other files in conf.d/)";
        }
        {
          assertion = lib.all (name: !(fragmentFiles ? ${name})) (builtins.attrNames cfg.extraConfigFiles);
          message = "services.uplink: a fragment and an extraConfigFiles entry have the same conf.d file name";
        }
        {
          assertion = hasMain || cfg.configDrive.enable;
          message = "services.uplink: set `settings` (the main uplink.toml) or enable `configDrive` so the node can receive one at boot";
        }
      ];

      environment.systemPackages = [ cfg.package ];
      environment.etc = etcFiles;

      networking.firewall = mkIf cfg.openFirewall {
        allowedTCPPorts = [ 179 ];
        allowedUDPPorts = [
          3784
          3785
          4784
          # Layer 2 mode's membership (`[layer2]`, memberlist's port).
          7946
        ];
      };

      # Layer 2 mode: uplink alone answers ARP for the service addresses; the kernel answers
      # only for addresses of the interface asked on and never sends a service address as
      # its ARP source (docs/layer2.md; MetalLB's `strictARP`).
      boot.kernel.sysctl = {
        "net.ipv4.conf.all.arp_ignore" = lib.mkDefault 1;
        "net.ipv4.conf.default.arp_ignore" = lib.mkDefault 1;
        "net.ipv4.conf.all.arp_announce" = lib.mkDefault 2;
        "net.ipv4.conf.default.arp_announce" = lib.mkDefault 2;
      };

      # uplink drains the node before a shutdown or reboot under a logind delay inhibitor.
      # logind.conf keys go in settings.Login: nixpkgs nixos-25.11 has no
      # services.logind.extraConfig (nixos/modules/system/boot/systemd/logind.nix removes it in
      # favour of settings.Login, as its release notes rl-2511.section.md say).
      services.logind.settings.Login.InhibitDelayMaxSec = cfg.inhibitDelayMaxSec;

      systemd.services.uplink = {
        description = "uplink: BGP, BFD and announcements towards the fabric";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        # Network policies are applied through NetworkManager (D-Bus) when the node runs it.
        after = [
          "network-online.target"
        ]
        ++ lib.optional config.networking.networkmanager.enable "NetworkManager.service";
        # Like the Debian unit: no config, no start (the config drive may not have one).
        unitConfig.ConditionPathExists = "/etc/uplink/uplink.toml";
        # A new config is reloaded, not restarted: sessions it does not change stay up, and
        # `nixos-rebuild switch` fails when uplink rejects it.
        reloadTriggers = [ configTree ];
        serviceConfig = {
          Type = "notify";
          NotifyAccess = "main";
          ExecStart = "${lib.getExe cfg.package} run --config /etc/uplink/uplink.toml --state-dir /var/lib/uplink";
          # Re-reads the config and waits for the result: only what changed is touched, and a
          # rejected config (printed with file:line:column) fails the reload and changes nothing.
          ExecReload = "${lib.getExe cfg.package} reload";
          Restart = "on-failure";
          RestartSec = "2s";
          # glibc's allocator as the image's unit tunes it: one arena and a fixed 128 KiB
          # mmap threshold make a full table's daemon a third smaller (docs/BENCHMARKS.md,
          # "Allocator").
          Environment = [ "MALLOC_ARENA_MAX=1" "MALLOC_MMAP_THRESHOLD_=131072" ];
          # Above the 90 s the daemon waits for its network policies before it starts the
          # routers anyway (docs/network.md).
          TimeoutStartSec = "120s";
          WatchdogSec = mkIf (cfg.watchdogSec != null) cfg.watchdogSec;

          # The control socket /run/uplink/uplink.sock and the single-instance lock, root-only
          # (uplink refuses a lock directory that others can write to).
          RuntimeDirectory = "uplink";
          RuntimeDirectoryMode = "0700";
          # /var/lib/uplink: what outlives a restart: an operator's drain, what each network
          # policy did (enactments.json, docs/network.md).
          StateDirectory = "uplink";
          StateDirectoryMode = "0700";
          UMask = "0077";

          # Root, limited to these capabilities (the control socket is root-only).
          CapabilityBoundingSet = capabilities;
          NoNewPrivileges = true;
          ProtectSystem = "strict";
          ProtectHome = true;
          PrivateTmp = true;
          PrivateDevices = true;
          ProtectKernelTunables = true;
          # ...but for the one tunable uplink sets (nexthop groups replaced without a
          # notification per route; `fib.nexthop_compat_mode = true` leaves it alone).
          ReadWritePaths = [ "-/proc/sys/net/ipv4/nexthop_compat_mode" ];
          ProtectKernelModules = true;
          ProtectKernelLogs = true;
          ProtectControlGroups = true;
          ProtectClock = true;
          ProtectHostname = true;
          ProtectProc = "invisible";
          RestrictAddressFamilies = [
            "AF_UNIX"
            "AF_INET"
            "AF_INET6"
            "AF_NETLINK"
            # Layer 2 mode answers ARP and NDP through packet sockets.
            "AF_PACKET"
          ];
          RestrictNamespaces = true;
          # SCHED_FIFO for the BFD thread: real-time scheduling must stay allowed.
          RestrictRealtime = false;
          RestrictSUIDSGID = true;
          LockPersonality = true;
          MemoryDenyWriteExecute = true;
          SystemCallArchitectures = "native";
          SystemCallFilter = [ "@system-service" ];
          SystemCallErrorNumber = "EPERM";
        };
      };
    }

    (mkIf cfg.waitReady.enable {
      systemd.services.uplink-wait-ready = {
        description = "Wait for uplink's BGP sessions to be up with their tables exchanged";
        wantedBy = [ "multi-user.target" ];
        requires = [ "uplink.service" ];
        after = [ "uplink.service" ];
        unitConfig.ConditionPathExists = "/etc/uplink/uplink.toml";
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          # Every configured session Established, End-of-RIB both ways (RFC 4724 §2).
          ExecStart = "${lib.getExe cfg.package} wait-ready --timeout ${cfg.waitReady.timeout}";
        };
      };
    })

    (mkIf cfg.configDrive.enable {
      environment.systemPackages = [ configHook ];

      systemd.services.uplink-config = {
        description = "uplink: node config from the config drive or uplink.config=URL";
        wantedBy = [ "multi-user.target" ];
        after = [
          "local-fs.target"
          "systemd-udev-trigger.service"
        ];
        before = [
          "uplink.service"
          "NetworkManager.service"
          "network-pre.target"
          "sshd.service"
          "frr.service"
        ];
        wants = [ "network-pre.target" ];
        environment.UPLINK_CONFIG_LABEL = cfg.configDrive.label;
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = lib.getExe configHook;
          # "uplink-config: applied from <source>" on the serial console, as the Debian image.
          StandardOutput = "journal+console";
          StandardError = "journal+console";
        };
      };

      systemd.services.uplink = {
        wants = [ "uplink-config.service" ];
        after = [ "uplink-config.service" ];
      };

      # The optional setup.sh hook of the config source, once the network is up.
      systemd.services.uplink-config-setup = {
        description = "uplink: run setup.sh from the config drive";
        wantedBy = [ "multi-user.target" ];
        wants = [ "network-online.target" ];
        after = [
          "network-online.target"
          "uplink-config.service"
        ];
        unitConfig.ConditionPathExists = "/run/uplink-config/setup.sh";
        path = with pkgs; [
          bash
          coreutils
          iproute2
          procps
        ];
        serviceConfig = {
          Type = "oneshot";
          RemainAfterExit = true;
          ExecStart = "${pkgs.bash}/bin/bash /run/uplink-config/setup.sh";
          StandardOutput = "journal+console";
        };
      };
    })
  ]);
}
