"""Pure, vectorised analyses of a canonical timeline. No plotting, no printing, no I/O."""
