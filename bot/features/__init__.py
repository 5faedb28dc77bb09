"""Bot features, one package each (each depends on evidence/ and on nothing of its siblings)."""
