// OpenSSLKit: TLS sessions and ES256 over OpenSSL 3. (in progress)
