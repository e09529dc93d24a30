"""The built-in environment specs, shipped as the package data ``bisector.data.specs`` (pyproject's
package-dir); nothing imports this package (it exists so importlib.resources finds it)."""
