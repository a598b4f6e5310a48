-- nexus_auth: asks nexus whether a request may pass (HAProxy 2.5+ Lua,
-- core.httpclient). Sets txn.nexus_allowed (true on 2xx) and
-- txn.nexus_status, and copies the headers named in NEXUS_UPSTREAM_HEADERS
-- from nexus' answer to the request. Any error leaves nexus_allowed unset:
-- the frontend then denies.
local nexus_url = os.getenv("NEXUS_URL")
local upstream_headers = {}
for h in string.gmatch(os.getenv("NEXUS_UPSTREAM_HEADERS") or "", "%S+") do
	upstream_headers[#upstream_headers + 1] = h
end

core.register_action("nexus_auth", { "http-req" }, function(txn)
	local path = txn.sf:pathq() or "/"
	local headers = {
		["x-original-method"] = { txn.sf:method() },
		["x-original-uri"] = { path },
		["x-forwarded-for"] = { txn.sf:src() },
	}
	-- Pass the client's headers on, as nginx's auth_request does, except
	-- the ones that describe the (empty) check request's own body and
	-- connection, and the password HAProxy checked.
	local skip = { ["content-length"] = true, ["transfer-encoding"] = true, ["connection"] = true,
		["x-original-method"] = true, ["x-original-uri"] = true, ["x-forwarded-for"] = true,
		["authorization"] = true }
	for name, vals in pairs(txn.http:req_get_headers()) do
		if not skip[name] and vals[0] ~= nil then
			headers[name] = { vals[0] }
		end
	end
	local ok, res = pcall(function()
		return core.httpclient():get({ url = nexus_url .. "/ext_authz" .. path, headers = headers, timeout = 1000 })
	end)
	if not ok or res == nil or res.status == nil or res.status == 0 then
		if not ok then
			core.Warning("nexus_auth: " .. tostring(res))
		end
		txn:set_var("txn.nexus_status", 0)
		return
	end
	txn:set_var("txn.nexus_status", res.status)
	if res.status >= 200 and res.status < 300 then
		for _, name in ipairs(upstream_headers) do
			local v = res.headers[string.lower(name)]
			if v ~= nil and v[0] ~= nil then
				txn.http:req_set_header(name, v[0])
			end
		end
		txn:set_var("txn.nexus_allowed", true)
	end
end, 0)
