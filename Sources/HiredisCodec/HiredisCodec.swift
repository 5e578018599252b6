import CHiredis
