"""Where candidates come from: releases on a package index (index, installer_config) and commits in a
git repository (git)."""
