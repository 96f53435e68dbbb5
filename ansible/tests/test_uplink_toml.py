"""The role's filters: what `uplink_toml` writes parses back (tomllib) to what went in;
`uplink_has_secrets` finds keys wherever they are; `uplink_seconds` reads uplink's durations."""

import os
import sys
import tomllib
import unittest
from collections.abc import Sequence

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "roles", "uplink", "filter_plugins"))

from uplink_toml import TomlError, uplink_has_secrets, uplink_seconds, uplink_toml  # noqa: E402

OMIT = "__omit_place_holder__5d7c0e"


class RoundTrip(unittest.TestCase):
    def round_trip(self, data):
        text = uplink_toml(data)
        try:
            return tomllib.loads(text), text
        except tomllib.TOMLDecodeError as e:
            self.fail(f"not TOML ({e}):\n{text}")

    def test_config_shape(self):
        data = {
            "always_block": ["169.254.0.0/16"],
            "node": {"name": "wk1", "labels": {"rack": "r2", "topology.kubernetes.io/zone": "a"}},
            "bgp": {
                "bfd_profiles": [{"name": "tor", "receive_interval": "200ms", "detect_multiplier": 3}],
                "routers": [
                    {
                        "asn": 65801,
                        "vrf": "",
                        "neighbors": [
                            {
                                "address": "172.18.20.1",
                                "asn": 65102,
                                "to_receive": {"allowed": {"mode": "filtered", "prefixes": [{"prefix": "0.0.0.0/0", "le": 32}]}},
                                "to_advertise": {"with_community": [{"community": "64512:1", "prefixes": ["10.0.0.0/24"]}]},
                            },
                            {"address": "172.18.20.9", "asn": 65102, "passive": True},
                        ],
                        "imports": [{"vrf": "cudn3"}],
                    },
                    {"asn": 65801, "vrf": "cudn4"},
                ],
            },
            "route_advertisements": [
                {"name": "x", "network_selectors": [{"network_selection_type": "DefaultNetwork"}]}
            ],
        }
        back, text = self.round_trip(data)
        self.assertEqual(back, data)
        # Reads like the hand-written example: arrays of tables, no empty [bgp] header.
        self.assertIn("[[bgp.routers.neighbors]]", text)
        self.assertIn("[bgp.routers.neighbors.to_receive.allowed]", text)
        self.assertNotIn("[bgp]\n", text)

    def test_strings_escape(self):
        data = {"s": 'quote " backslash \\ newline \n tab \t bell \x07 unicode é 🙂', "k": {"a key.with dots": "v"}}
        back, _ = self.round_trip(data)
        self.assertEqual(back, data)

    def test_omitted_and_empty_values_are_left_out(self):
        data = {"a": None, "b": OMIT, "c": [], "d": {}, "e": {"f": [], "g": 1}, "h": ["x", None, OMIT], "v": ""}
        back, _ = self.round_trip(data)
        self.assertEqual(back, {"e": {"g": 1}, "h": ["x"], "v": ""})

    def test_templated_integers(self):
        # What Ansible makes of asn: "{{ tor.asn }}": a string, which uplink would reject.
        data = {
            "bgp": {"routers": [{"asn": "65801", "id": "10.0.0.1", "neighbors": [{"asn": "65102", "port": "179", "password": "123"}]}]},
            "node": {"labels": {"asn": "65801", "rack": "7"}},
            "networks": [{"name": "x", "labels": {"port": "1"}}],
            "services": [{"name": "web", "health": {"port": "8080", "path": "/"}}],
        }
        back, _ = self.round_trip(data)
        self.assertEqual(back["bgp"]["routers"][0]["asn"], 65801)
        self.assertEqual(back["bgp"]["routers"][0]["neighbors"][0], {"asn": 65102, "port": 179, "password": "123"})
        self.assertEqual(back["node"]["labels"], {"asn": "65801", "rack": "7"})
        self.assertEqual(back["networks"][0]["labels"], {"port": "1"})
        self.assertEqual(back["services"][0]["health"]["port"], 8080)

    def test_vault_values_are_strings(self):
        # Like ansible's AnsibleVaultEncryptedUnicode: a Sequence whose str() is the secret.
        class Vaulted(Sequence):
            __ENCRYPTED__ = True

            def __getitem__(self, i):
                return "k3y"[i]

            def __len__(self):
                return 3

            def __str__(self):
                return "k3y"

        back, _ = self.round_trip({"n": [{"password": Vaulted(), "asn": 1}]})
        self.assertEqual(back, {"n": [{"password": "k3y", "asn": 1}]})
        self.assertTrue(uplink_has_secrets({"password": Vaulted()}))

    def test_keep_empty(self):
        text = uplink_toml({"c": [], "d": {}}, drop_empty=False)
        self.assertEqual(tomllib.loads(text), {"c": [], "d": {}})

    def test_inline_values(self):
        data = {"m": [[{"a": 1}], [2, 3]], "f": 1.5, "t": False}
        back, _ = self.round_trip(data)
        self.assertEqual(back, data)

    def test_errors_name_the_place(self):
        with self.assertRaisesRegex(TomlError, r"bgp\.x: inf"):
            uplink_toml({"bgp": {"x": float("inf")}})
        with self.assertRaisesRegex(TomlError, "needs a mapping"):
            uplink_toml(["x"])
        with self.assertRaisesRegex(TomlError, "has no TOML form"):
            uplink_toml({"x": object()})


class Secrets(unittest.TestCase):
    def test_keys_are_found_where_uplink_reads_them(self):
        neighbor = {"bgp": {"routers": [{"asn": 1, "neighbors": [{"address": "10.0.0.1", "password": "k"}]}]}}
        bfd = {"bgp": {"bfd_profiles": [{"name": "t", "authentication": {"type": "keyed-sha1", "password": "k"}}]}}
        self.assertTrue(uplink_has_secrets(neighbor))
        self.assertTrue(uplink_has_secrets(bfd))
        # A manifest as documents or as text (MetalLB BGPPeer: spec.password).
        peer = {"kind": "BGPPeer", "spec": {"peerAddress": "10.0.0.1", "Password": "k"}}
        self.assertTrue(uplink_has_secrets([{"kind": "IPAddressPool"}, peer]))
        self.assertTrue(uplink_has_secrets("kind: IPAddressPool\n---\nkind: BGPPeer\nspec: {password: k}\n"))

    def test_no_keys(self):
        # A key file's path is not a key; empty and omitted values are left out of the file.
        files = {"bgp": {"routers": [{"neighbors": [{"password_file": "keys/tor.key", "password": ""}]}]}}
        self.assertFalse(uplink_has_secrets(files))
        self.assertFalse(uplink_has_secrets({"password": None, "x": {"password": OMIT}}))
        self.assertFalse(uplink_has_secrets({"labels": {"a": "password"}, "name": "password"}))
        self.assertFalse(uplink_has_secrets("kind: BGPPeer\nspec: {passwordSecret: tor-key}\n"))
        self.assertFalse(uplink_has_secrets([]))

    def test_text_that_is_not_yaml_counts_as_secret(self):
        self.assertTrue(uplink_has_secrets("a: [unclosed\n"))


class Seconds(unittest.TestCase):
    def test_durations(self):
        for text, want in [("15s", 15), ("1m30s", 90), ("500ms", 1), ("1h", 3600), ("2m", 120),
                           ("1s1ms", 2), ("0s", 0), (" 5s ", 5), ("1h1m1s1ms", 3662)]:
            self.assertEqual(uplink_seconds(text), want, text)

    def test_what_uplink_rejects(self):
        for text in ["", "15", "1.5s", "5d", "s", "30s1m", None, 15]:
            with self.assertRaisesRegex(TomlError, "not a duration"):
                uplink_seconds(text)


if __name__ == "__main__":
    unittest.main()
