# NixOS netboot image for PXE: a kernel, an initrd that carries the whole system (the Nix store
# as a squashfs inside the initrd, so PXE needs nothing but TFTP/HTTP) and an iPXE script,
# based on nixpkgs' installer/netboot/netboot.nix. The image is generic: a node gets its name
# and its uplink config at boot from a config drive labelled UPLINK or from
# `uplink.config=URL` on the kernel command line (services.uplink.configDrive), like the Debian
# image in image/.
#
# Build: nix build .#netboot   -> result/{bzImage,initrd,netboot.ipxe}
{
  config,
  lib,
  pkgs,
  modulesPath,
  ...
}:

{
  imports = [
    (modulesPath + "/installer/netboot/netboot.nix")
    (modulesPath + "/profiles/minimal.nix")
    ./module.nix
  ];

  services.uplink = {
    enable = true;
    configDrive.enable = true;
    openFirewall = true;
  };

  # The name comes from the config source at boot, not from the image.
  networking.hostName = lib.mkDefault "";

  # NetworkManager manages the NICs (uplink's node-network policies talk to it over D-Bus);
  # a NIC is configured only if a profile from the config source says so.
  networking.networkmanager.enable = true;
  networking.networkmanager.settings.main.no-auto-default = "*";
  networking.useDHCP = false;

  # VLANs and VRF-lite for the fabric side.
  boot.kernelModules = [
    "8021q"
    "vrf"
  ];
  boot.supportedFilesystems = [ "vfat" ];
  boot.kernelParams = [ "console=ttyS0,115200" ];

  # Management: SSH as root with a key from the config source, and Python for Ansible.
  services.openssh = {
    enable = true;
    settings.PermitRootLogin = "prohibit-password";
    settings.PasswordAuthentication = false;
  };
  environment.systemPackages = with pkgs; [
    iproute2
    nftables
    python3
  ];

  # uplink's READY (systemd's "Started uplink.service") and the hook's line on the serial
  # console, as the Debian image does. nixpkgs nixos-25.11 still has services.journald.extraConfig
  # (nixos/modules/system/boot/systemd/journald.nix declares it; journald.conf has no structured
  # `settings` there). Its replacement, services.journald.settings.Journal, comes in 26.11
  # (rl-2611.section.md): move these keys there when the flake's pin moves.
  services.journald.extraConfig = ''
    ForwardToConsole=yes
    TTYPath=/dev/ttyS0
    MaxLevelConsole=info
  '';

  # The PXE artifacts in one directory; netboot.ipxe loads bzImage and initrd relative to its
  # own URL and passes iPXE's ${cmdline} through (e.g. `set cmdline uplink.config=http://...`).
  system.build.pxe = pkgs.linkFarm "uplink-netboot" [
    {
      name = config.system.boot.loader.kernelFile;
      path = "${config.system.build.kernel}/${config.system.boot.loader.kernelFile}";
    }
    {
      name = "initrd";
      path = "${config.system.build.netbootRamdisk}/initrd";
    }
    {
      name = "netboot.ipxe";
      path = "${config.system.build.netbootIpxeScript}/netboot.ipxe";
    }
  ];

  system.stateVersion = "25.11";
}
