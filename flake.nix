# uplink's Nix entry point. The Nix files live in nix/ (see nix/README.md); this file sits at
# the top of the repo because the package is built from the whole Cargo workspace, and a flake
# can only read files below its own directory.
{
  description = "uplink: BGP/BFD daemon for bare-metal nodes — static package, NixOS module, PXE netboot image, VM test";

  inputs.nixpkgs.url = "github:NixOS/nixpkgs/nixos-25.11";

  outputs =
    { self, nixpkgs }:
    let
      # The static build, the netboot image and the VM test target x86_64 Linux, as the rest of
      # the project does.
      system = "x86_64-linux";
      pkgs = nixpkgs.legacyPackages.${system};
      netboot = self.nixosConfigurations.netboot.config.system.build;
    in
    {
      packages.${system} = {
        # glibc, statically linked (crt-static), like `make static`.
        uplink = pkgs.callPackage ./nix/package.nix { };
        # musl, through nixpkgs' static package set.
        uplink-musl = pkgs.pkgsStatic.callPackage ./nix/package.nix { };
        default = self.packages.${system}.uplink;
        # bzImage, initrd (with the squashfs store) and netboot.ipxe.
        netboot = netboot.pxe;
      };

      overlays.default = final: _prev: { uplink = final.callPackage ./nix/package.nix { }; };

      # A path (not an imported function) so that importing it twice, e.g. through
      # nix/netboot.nix, declares the options once.
      nixosModules.uplink = ./nix/module.nix;
      nixosModules.default = self.nixosModules.uplink;

      nixosConfigurations.netboot = nixpkgs.lib.nixosSystem {
        modules = [
          ./nix/netboot.nix
          {
            nixpkgs.hostPlatform = system;
            services.uplink.package = self.packages.${system}.uplink;
          }
        ];
      };

      checks.${system} = {
        uplink = self.packages.${system}.uplink;
        uplink-musl = self.packages.${system}.uplink-musl;
        # The whole netboot system (closure, squashfs, initrd) builds.
        netboot = netboot.pxe;
        vm = pkgs.testers.runNixOSTest (
          import ./nix/tests/vm.nix {
            uplinkModule = self.nixosModules.uplink;
            uplinkPackage = self.packages.${system}.uplink;
          }
        );
      };

      formatter.${system} = pkgs.nixfmt-rfc-style;
    };
}
