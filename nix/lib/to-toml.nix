# A TOML renderer in pure Nix (builtins only), used by scripts/nix-check to turn the Nix
# settings of the VM test into uplink.toml where nixpkgs is not available. The module itself
# renders with pkgs.formats.toml; this covers what uplink configs use: tables, arrays of
# tables, inline tables inside arrays, strings, integers, booleans and floats.
let
  inherit (builtins)
    attrNames
    concatStringsSep
    filter
    isAttrs
    isBool
    isFloat
    isInt
    isList
    isString
    length
    map
    match
    toJSON
    ;

  bareKey = k: match "[A-Za-z0-9_-]+" k != null;
  key = k: if bareKey k then k else toJSON k;
  # JSON string escapes are valid TOML basic-string escapes.
  value =
    v:
    if isString v then
      toJSON v
    else if isBool v then
      (if v then "true" else "false")
    else if isInt v || isFloat v then
      toString v
    else if isList v then
      "[" + concatStringsSep ", " (map value v) + "]"
    else if isAttrs v then
      "{ " + concatStringsSep ", " (map (k: "${key k} = ${value v.${k}}") (attrNames v)) + " }"
    else
      throw "to-toml: cannot render a value of this type";

  isTableArray = v: isList v && length v > 0 && builtins.all isAttrs v;
  # Scalars and inline values first, then sub-tables, then arrays of tables: the order TOML
  # needs so a key never lands in the wrong table.
  section =
    path: attrs:
    let
      names = attrNames attrs;
      plain = filter (k: !(isAttrs attrs.${k}) && !(isTableArray attrs.${k})) names;
      tables = filter (k: isAttrs attrs.${k}) names;
      arrays = filter (k: isTableArray attrs.${k}) names;
      sub = k: path ++ [ (key k) ];
      header = p: concatStringsSep "." p;
    in
    concatStringsSep "" (map (k: "${key k} = ${value attrs.${k}}\n") plain)
    + concatStringsSep "" (
      map (
        k:
        let
          body = section (sub k) attrs.${k};
          # A table with only sub-tables needs no header of its own.
          own = filter (x: !(isAttrs attrs.${k}.${x}) && !(isTableArray attrs.${k}.${x})) (
            attrNames attrs.${k}
          );
        in
        (if own == [ ] && attrs.${k} != { } then "" else "\n[${header (sub k)}]\n") + body
      ) tables
    )
    + concatStringsSep "" (
      map (
        k: concatStringsSep "" (map (t: "\n[[${header (sub k)}]]\n" + section (sub k) t) attrs.${k})
      ) arrays
    );
in
attrs: section [ ] attrs
